/**
 * timeLimit: an answer Postgres sent while the event loop was held up is taken,
 * not counted as missing because the limit's timer ran first (outside review 216:
 * heartbeats answered during a handler's block were dropped as unanswered).
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { timeLimit } from '../src/lifecycle/time-limit.js';
import { ConnectionError } from '../src/errors.js';
import { databaseUrl } from './helpers/database.js';

let client: pg.Client;
beforeAll(async () => {
  client = new pg.Client({ connectionString: databaseUrl(), application_name: 'sluice-test-time-limit' });
  await client.connect();
});
afterAll(async () => {
  await client.end();
});

describe('timeLimit', () => {
  it('takes an answer that came while the event loop was blocked past the limit', async () => {
    await client.query('SELECT 1'); // warm
    let dropped = false;
    const limited = timeLimit(client.query('SELECT 42 AS n'), 50, () => (dropped = true), 'statement');
    // Postgres answers within a few milliseconds; the loop is held for 300.
    const end = performance.now() + 300;
    while (performance.now() < end);
    expect((await limited).rows).toEqual([{ n: 42 }]);
    expect(dropped).toBe(false);
  });

  it('still gives up on an answer that does not come', async () => {
    let dropped = false;
    const never = new Promise<never>(() => {});
    await expect(timeLimit(never, 20, () => (dropped = true), 'statement')).rejects.toBeInstanceOf(ConnectionError);
    expect(dropped).toBe(true);
  });
});
