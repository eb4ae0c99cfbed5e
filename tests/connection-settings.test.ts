import pg from 'pg';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, Queue, Worker, type JobRow, type WorkerOptions } from '../src/index.js';
import { postgresJsAdapter } from '../src/db/adapters/postgres-js.js';
import type { Driver } from '../src/db/driver.js';
import { openDriver } from '../src/db/drivers/open.js';
import { createTestSchema, waitFor, type TestDatabase } from './helpers/database.js';

// A worker on the application's own connection objects reads Sluice's rows with
// Sluice's own parsing, whatever the application set for its own queries: pg's
// process-wide type parsers, postgres.js's transform and types (outside review 69:
// with them the worker ran no job, or retried failing jobs for ever).

const TIMESTAMPTZ = 1184;
const JSONB = 3802;

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestSchema('connsettings');
});
afterAll(async () => {
  await db?.drop();
});

/** What a worker on `connection` does with a job that succeeds and one that always fails (2 attempts). */
async function runBoth(connection: Pick<WorkerOptions, 'pool' | 'sql' | 'driver'>, queueName: string) {
  const seen: { runAt: unknown; maxAttempts: unknown; payload: unknown }[] = [];
  const events = { complete: 0, fail: 0, lockLost: 0 };
  let failingRuns = 0;
  const worker = new Worker({
    ...connection,
    schema: db.schema,
    queues: [queueName],
    pollIntervalMs: 100,
    backoff: { baseMs: 10, maxMs: 10 },
    tasks: {
      ok: async (payload: unknown, ctx: { job: JobRow }) => {
        seen.push({ runAt: ctx.job.run_at, maxAttempts: ctx.job.max_attempts, payload });
        return { fine: true };
      },
      broken: async () => {
        failingRuns++;
        throw new Error('always');
      },
    },
  });
  const errors: unknown[] = [];
  worker.on('error', (err) => errors.push(err));
  worker.on('job:complete', () => events.complete++);
  worker.on('job:fail', () => events.fail++);
  worker.on('job:lock-lost', () => events.lockLost++);
  const queue = new Queue({ connectionString: db.url, schema: db.schema });
  await worker.start();
  try {
    const ok = await queue.enqueue('ok', { n: 1 }, { queue: queueName });
    const broken = await queue.enqueue('broken', {}, { queue: queueName, maxAttempts: 2 });
    const done = await waitFor(async () => {
      const { rows } = await db.pool.query<{ id: string; status: string; attempts: number }>(
        `SELECT id::text, status, attempts FROM ${db.s}.jobs WHERE id = ANY($1::bigint[])`,
        [[ok, broken]],
      );
      const byId = new Map(rows.map((r) => [r.id, r]));
      return byId.get(ok)?.status === 'completed' && byId.get(broken)?.status === 'failed' ? byId : undefined;
    }, 'both jobs finished');
    // The failure's events are written once its row is: give the worker's write a moment to be reported.
    await waitFor(() => events.fail >= 2, 'two job:fail events');
    return { seen, events, failingRuns, attempts: done.get(broken)!.attempts, errors, queue, ok };
  } finally {
    await worker.stop();
    await queue.close();
  }
}

describe("a worker on the application's own connection", () => {
  it("pg: runs jobs and stops retrying at maxAttempts whatever the process's pg.types parsers say", async () => {
    const before = { ts: pg.types.getTypeParser(TIMESTAMPTZ), jsonb: pg.types.getTypeParser(JSONB) };
    pg.types.setTypeParser(TIMESTAMPTZ, (v: string) => v);
    pg.types.setTypeParser(JSONB, (v: string) => v);
    const pool = new pg.Pool({ connectionString: db.url, max: 4 });
    try {
      const r = await runBoth({ pool }, 'pg_types');
      expect(r.errors).toEqual([]);
      expect(r.seen).toHaveLength(1);
      expect(r.seen[0]!.runAt).toBeInstanceOf(Date);
      expect(r.seen[0]!.payload).toEqual({ n: 1 });
      expect(r.failingRuns).toBe(2);
      expect(r.attempts).toBe(2);
      expect(r.events).toEqual({ complete: 1, fail: 2, lockLost: 0 });
      // The application's own queries still get its parsers.
      const { rows } = await pool.query<{ t: unknown }>('SELECT now() AS t');
      expect(typeof rows[0]!.t).toBe('string');
    } finally {
      pg.types.setTypeParser(TIMESTAMPTZ, before.ts);
      pg.types.setTypeParser(JSONB, before.jsonb);
      await pool.end();
    }
  });

  it('postgres.js: runs jobs and stops retrying at maxAttempts with transform: postgres.camel and types of its own', async () => {
    const sql = postgres(db.url, {
      max: 4,
      onnotice: () => {},
      transform: postgres.camel,
      types: { date: { to: TIMESTAMPTZ, from: [1082, 1114, TIMESTAMPTZ], serialize: (x: string) => x, parse: (x: string) => x } },
    });
    try {
      const r = await runBoth({ sql, driver: 'postgres.js' }, 'pgjs_transform');
      expect(r.errors).toEqual([]);
      expect(r.seen).toHaveLength(1);
      expect(r.seen[0]!.runAt).toBeInstanceOf(Date);
      expect(r.seen[0]!.maxAttempts).toBe(5);
      expect(r.failingRuns).toBe(2);
      expect(r.attempts).toBe(2);
      expect(r.events).toEqual({ complete: 1, fail: 2, lockLost: 0 });
      // A Queue on the same sql reads rows as documented (snake_case, dates).
      const queue = new Queue({ sql, schema: db.schema });
      try {
        const job = await queue.getJob(r.ok);
        expect(job?.status).toBe('completed');
        expect(job?.run_at).toBeInstanceOf(Date);
        expect(job?.result).toEqual({ fine: true });
      } finally {
        await queue.close();
      }
      // The application's own queries keep its transform.
      const [row] = await sql`SELECT 1 AS some_column`;
      expect(row).toEqual({ someColumn: 1 });
    } finally {
      await sql.end();
    }
  });

  it("postgres.js: an enqueue in the caller's transaction returns the id through a renaming transform, and refuses one it cannot read (review 70)", async () => {
    const queue = new Queue({ connectionString: db.url, schema: db.schema });
    const pascal = postgres(db.url, { max: 1, onnotice: () => {}, transform: postgres.pascal });
    const wrapped = postgres(db.url, {
      max: 1,
      onnotice: () => {},
      transform: { row: { from: (row: unknown) => ({ w: row }) } },
    });
    try {
      const [one, many] = await pascal.begin(async (tx) => [
        await queue.enqueue('t', {}, { queue: 'tx_pascal', tx: postgresJsAdapter(tx) }),
        await queue.enqueueMany([{ task: 't', queue: 'tx_pascal' }], { tx: postgresJsAdapter(tx) }),
      ]);
      expect((await queue.getJob(one))?.queue).toBe('tx_pascal');
      expect((await queue.getJob(many[0]!))?.queue).toBe('tx_pascal');
      // Before: undefined came back for a job that committed.
      await expect(
        wrapped.begin((tx) => queue.enqueue('t', {}, { queue: 'tx_wrapped', tx: postgresJsAdapter(tx) })),
      ).rejects.toThrow(ConfigError);
      const { rows } = await db.pool.query(`SELECT count(*)::int AS n FROM ${db.s}.jobs WHERE queue = 'tx_wrapped'`);
      expect(rows[0].n).toBe(0); // the error rolled the caller's transaction back
    } finally {
      await queue.close();
      await pascal.end();
      await wrapped.end();
    }
  });
});

describe('client_connection_check_interval on the connections of pools Sluice makes', () => {
  // See src/db/statements/session.ts: a dead client's statement waiting on a lock is ended.
  const show = async (driver: Driver) =>
    ((await driver.query('SELECT current_setting($1) AS v', ['client_connection_check_interval'])).rows[0] as { v: string }).v;

  it("is 1 s on Sluice's pools, a value the role or connection gives is kept, and the application's pool is left alone", async () => {
    const made = await openDriver('pg', { connectionString: db.url, statementTimeoutMs: 5_000 }, 2, 'sluice-test');
    const url = new URL(db.url);
    url.searchParams.set('options', '-c client_connection_check_interval=5s');
    const given = await openDriver('pg', { connectionString: url.href, statementTimeoutMs: 5_000 }, 1, 'sluice-test');
    const own = new pg.Pool({ connectionString: db.url, max: 1 });
    const wrapped = await openDriver('pg', { pool: own, statementTimeoutMs: 5_000 }, 1, 'sluice-test');
    try {
      const { rows } = await made.query(`SELECT current_setting('server_version_num')::int AS v`);
      // PostgreSQL 13 has no such setting: the connection works without it.
      if ((rows[0] as { v: number }).v < 140000) return;
      expect(await show(made)).toBe('1s');
      expect(await show(given)).toBe('5s');
      expect(await show(wrapped)).toBe('0');
    } finally {
      await made.end();
      await given.end();
      await wrapped.end();
      await own.end();
    }
  });
});
