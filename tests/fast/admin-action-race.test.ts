/**
 * An admin action whose job changes status between the action's statement and
 * the read that explains a refusal (admin/jobs.ts act), without Postgres: the
 * statements are answered in turn by a scripted Queryable. tests/admin.test.ts
 * runs the actions on Postgres.
 */
import { describe, expect, it } from 'vitest';
import { retryJob } from '../../src/admin/jobs.js';
import { adminStatements } from '../../src/db/statements/admin.js';
import type { Queryable } from '../../src/db/executor.js';

const SCHEMA = 'sluice';
const admin = adminStatements(SCHEMA);
const JOB = {
  id: '7',
  queue: 'q',
  task: 't',
  status: 'pending',
  run_at: new Date(0).toISOString(),
  created_at: new Date(0).toISOString(),
  updated_at: new Date(0).toISOString(),
};

/** Answers the retry statement with `retried` in turn (a row or none) and statusOf with `statuses` in turn; wakes with nothing. */
function scripted(retried: boolean[], statuses: string[]): Queryable & { sent: string[] } {
  const sent: string[] = [];
  return {
    sent,
    query(text: string) {
      if (text === admin.retry) {
        sent.push('retry');
        return Promise.resolve({ rows: retried.shift() ? [JOB] : [] });
      }
      if (text === admin.statusOf) {
        sent.push('statusOf');
        return Promise.resolve({ rows: [{ status: statuses.shift() }] });
      }
      return Promise.resolve({ rows: [] });
    },
  };
}

describe('an admin action on a job that changes under it (outside review 230)', () => {
  it('is tried again when the job reached a status the action takes: not "cannot retry a job that is failed"', async () => {
    const db = scripted([false, true], ['failed']);
    expect(await retryJob(db, SCHEMA, '7')).toMatchObject({ ok: true, job: { id: '7' } });
    expect(db.sent).toEqual(['retry', 'statusOf', 'retry']);
  });

  it('is refused with the status that blocked it, and tried at most three times', async () => {
    expect(await retryJob(scripted([false], ['processing']), SCHEMA, '7')).toEqual({
      ok: false,
      reason: 'wrong_status',
      status: 'processing',
    });
    const flapping = scripted([false, false, false, true], ['failed', 'failed', 'failed']);
    expect(await retryJob(flapping, SCHEMA, '7')).toEqual({ ok: false, reason: 'wrong_status', status: 'failed' });
    expect(flapping.sent.filter((s) => s === 'retry')).toHaveLength(3);
  });
});
