import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConnectionError, Queue, Worker, type JobRow } from '../src/index.js';
import type { DriverName } from '../src/db/driver.js';
import { openDriver } from '../src/db/drivers/open.js';
import { PgWorkerStore } from '../src/db/store.js';
import type { CycleRequest } from '../src/db/worker-store.js';
import { setQueueGroups } from '../src/groups/settings.js';
import { createTestSchema, waitFor, type TestDatabase } from './helpers/database.js';

// A statement past statementTimeoutMs fails with a ConnectionError and its
// connection is dropped. Dropping it did not stop the statement: a session waiting
// on a lock ran it when the lock went, seconds after its caller had given up
// (outside review 61: a worker's claim committed late, for jobs nobody held,
// which the rescuer then failed as started without their handler ever running).

let db: TestDatabase;
let locker: pg.Client;

beforeAll(async () => {
  db = await createTestSchema('statement_cancel');
  await db.pool.query(`CREATE TABLE ${db.s}.t (n int)`);
  locker = new pg.Client({ connectionString: db.url });
  await locker.connect();
});

afterAll(async () => {
  await locker.end();
  await db.drop();
});

/** Sessions of `app` waiting for a lock now. */
async function lockWaiters(app: string): Promise<number> {
  const { rows } = await db.pool.query(
    `SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`,
    [app],
  );
  return rows[0].n as number;
}

/** Whether some session waits for a lock in a statement on this file's jobs table. */
async function jobsStatementWaits(): Promise<boolean> {
  const { rows } = await db.pool.query(
    `SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1`,
    [`%${db.s}.jobs%`],
  );
  return rows[0].n > 0;
}

describe.each<DriverName>(['pg', 'postgres.js'])('a statement past its limit on the %s driver', (name) => {
  it('is cancelled in Postgres: it never runs after its caller got the error', async () => {
    // The file's own schema in the name: the same file runs beside this one in another project.
    const n = name === 'pg' ? 1 : 2;
    const app = `sluice-cancel-${n}-${db.schema}`.slice(0, 63);
    const driver = await openDriver(name, { connectionString: db.url, statementTimeoutMs: 500 }, 2, app);
    try {
      await driver.query('SELECT 1'); // connected: the limit below is the statement's alone
      await locker.query('BEGIN');
      await locker.query(`LOCK TABLE ${db.s}.t IN ACCESS EXCLUSIVE MODE`);
      await expect(driver.query(`INSERT INTO ${db.s}.t VALUES (${n})`)).rejects.toBeInstanceOf(ConnectionError);
      // Cancelled, the session stops waiting for the lock at once.
      await waitFor(async () => (await lockWaiters(app)) === 0, 'no session of the driver left waiting for the lock');
      await locker.query('COMMIT');
      // Anything still waiting would have run by now.
      await new Promise((resolve) => setTimeout(resolve, 300));
      const { rows } = await db.pool.query(`SELECT count(*)::int AS n FROM ${db.s}.t WHERE n = $1`, [n]);
      expect(rows[0].n).toBe(0);
      // And the driver goes on, on a new connection.
      await driver.query(`INSERT INTO ${db.s}.t VALUES (${n})`);
      expect((await db.pool.query(`SELECT count(*)::int AS n FROM ${db.s}.t WHERE n = $1`, [n])).rows[0].n).toBe(1);
    } finally {
      await locker.query('ROLLBACK').catch(() => {});
      await driver.end();
    }
  });
});

describe.each<DriverName>(['pg', 'postgres.js'])('a statement in flight when the %s driver is aborted', (name) => {
  it('is cancelled in Postgres: it never runs after abort() and end()', async () => {
    // Outside review 65: stop() past its deadline cut the connections of a claim
    // waiting on a LOCK TABLE without cancelling it; the claim committed when the
    // lock went, for a job the stopped worker never ran (failed by the rescuer).
    const n = name === 'pg' ? 3 : 4;
    const app = `sluice-abort-${n}-${db.schema}`.slice(0, 63);
    const driver = await openDriver(name, { connectionString: db.url, statementTimeoutMs: 60_000 }, 2, app);
    try {
      await driver.query('SELECT 1');
      await locker.query('BEGIN');
      await locker.query(`LOCK TABLE ${db.s}.t IN ACCESS EXCLUSIVE MODE`);
      const waiting = driver.query(`INSERT INTO ${db.s}.t VALUES (${n})`);
      const failed = waiting.then(
        () => undefined,
        (err: unknown) => err,
      );
      await waitFor(async () => (await lockWaiters(app)) === 1, 'the insert waiting for the lock');
      driver.abort(new ConnectionError('aborted by the test'));
      expect(await failed).toBeInstanceOf(ConnectionError);
      await driver.end();
      await waitFor(async () => (await lockWaiters(app)) === 0, 'no session of the driver left waiting for the lock');
      await locker.query('COMMIT');
      await new Promise((resolve) => setTimeout(resolve, 300));
      const { rows } = await db.pool.query(`SELECT count(*)::int AS n FROM ${db.s}.t WHERE n = $1`, [n]);
      expect(rows[0].n).toBe(0);
    } finally {
      await locker.query('ROLLBACK').catch(() => {});
      await driver.end().catch(() => {});
    }
  });
});

describe('a worker stopped while its claim waits on a table lock', () => {
  // Outside reviews 65 and 66: the claim, blocked by LOCK TABLE (a migration, a
  // VACUUM FULL during a deploy), committed after the stop had given up on it, or
  // returned after the stop's deadline and was never handed back: either way its
  // job stayed processing, locked to a stopped worker, and the rescuer failed it
  // (maxAttempts 1) without it ever running.
  it.each([
    ['after stop() has settled', undefined],
    ['past the stop deadline, before it gives up on Postgres', 2_600],
  ])('leaves the job pending with its attempt when the lock goes %s', async (_, releaseAfterMs) => {
    await db.pool.query(`DELETE FROM ${db.s}.jobs`);
    const queue = new Queue({ pool: db.pool, schema: db.schema });
    const runs: string[] = [];
    const handedBack: JobRow[] = [];
    const worker = new Worker({
      connectionString: db.url,
      schema: db.schema,
      shutdownTimeoutMs: 300, // the deadline: 2 s, the least stop() gives
      pollIntervalMs: 200,
      maintenance: false,
      tasks: { t: (_payload, { job }) => void runs.push(job.id) },
    });
    worker.on('error', () => {});
    worker.on('jobs:handed-back', (jobs) => handedBack.push(...jobs));
    await worker.start();
    await locker.query('BEGIN');
    await locker.query(`LOCK TABLE ${db.s}.jobs IN ACCESS EXCLUSIVE MODE`);
    let released = false;
    const release = async () => {
      if (released) return;
      released = true;
      await locker.query('COMMIT');
    };
    try {
      const id = await queue.enqueue('t', {}, { tx: locker, maxAttempts: 1 });
      await waitFor(jobsStatementWaits, "the worker's claim waiting for the lock");
      const stopped = worker.stop();
      if (releaseAfterMs !== undefined) {
        await new Promise((resolve) => setTimeout(resolve, releaseAfterMs));
        await release();
      }
      await stopped;
      await release();
      await new Promise((resolve) => setTimeout(resolve, 300)); // anything still waiting would have run
      const { rows } = await db.pool.query(`SELECT status, attempts, locked_by FROM ${db.s}.jobs WHERE id = $1`, [id]);
      expect(rows[0]).toEqual({ status: 'pending', attempts: 0, locked_by: null });
      expect(runs).toEqual([]);
      // Claimed late and handed back, or never claimed: never both, never neither.
      expect(handedBack.map((j) => j.id).filter((j) => j === id).length).toBeLessThanOrEqual(1);
    } finally {
      await release().catch(() => {});
    }
  });
});

describe('a worker stopped while its start waits on a table lock', () => {
  it('settles without waiting for the lock, and claims nothing', async () => {
    // Outside review 66: stop() waited for start(), whose first query waited on the
    // lock for statementTimeoutMs (33 s); `sluice worker` likewise on SIGTERM.
    await db.pool.query(`DELETE FROM ${db.s}.jobs`);
    await db.pool.query(`INSERT INTO ${db.s}.jobs (task) VALUES ('t')`);
    const worker = new Worker({
      connectionString: db.url,
      schema: db.schema,
      shutdownTimeoutMs: 300,
      statementTimeoutMs: 120_000, // longer than this test may take: only the stop's cut ends the wait
      maintenance: false,
      tasks: { t: () => {} },
    });
    const errors: Error[] = [];
    worker.on('error', (err) => errors.push(err));
    await locker.query('BEGIN');
    await locker.query(`LOCK TABLE ${db.s}.jobs IN ACCESS EXCLUSIVE MODE`);
    try {
      const started = worker.start().then(
        () => 'started',
        (err: Error) => err,
      );
      await waitFor(jobsStatementWaits, "the worker's start-up query waiting for the lock");
      await worker.stop(); // with the lock still held
      expect(await started).toBeDefined();
      expect(errors.some((err) => /deadline of stop\(\)/.test(err.message))).toBe(true);
    } finally {
      await locker.query('COMMIT');
    }
    await new Promise((resolve) => setTimeout(resolve, 300));
    const { rows } = await db.pool.query(`SELECT status, attempts FROM ${db.s}.jobs`);
    expect(rows).toEqual([{ status: 'pending', attempts: 0 }]);
  });
});

describe('a worker whose stop gives up on Postgres', () => {
  it('gives back, on a connection of its own, the rows still locked to it (a claim that committed as it gave up)', async () => {
    // Review 67: a claim that committed within milliseconds of the give-up left its
    // job processing, locked to the stopped worker; the rescuer failed it unrun.
    await db.pool.query(`DELETE FROM ${db.s}.jobs`);
    const worker = new Worker({
      connectionString: db.url,
      schema: db.schema,
      shutdownTimeoutMs: 300,
      pollIntervalMs: 200,
      maintenance: false,
      tasks: { t: () => {} },
    });
    worker.on('error', () => {});
    await worker.start();
    // A job as such a claim leaves it: processing, locked to this worker, which does not know it.
    const { rows } = await db.pool.query(
      `INSERT INTO ${db.s}.jobs (task, queue, max_attempts) VALUES ('t', 'elsewhere', 1) RETURNING id`,
    );
    const id = rows[0].id as string;
    await db.pool.query(
      `UPDATE ${db.s}.jobs SET status = 'processing', attempts = 1, locked_by = $2, locked_at = now(), started_at = now() WHERE id = $1`,
      [id, worker.config.workerId],
    );
    // The worker's next claim waits on this lock, and so does its stop, which gives up on its pool.
    await locker.query('BEGIN');
    await locker.query(`LOCK TABLE ${db.s}.jobs IN ACCESS EXCLUSIVE MODE`);
    try {
      await waitFor(jobsStatementWaits, "the worker's claim waiting for the lock");
      const stopped = worker.stop();
      // The last sweep, on its own connection, waits on the lock too: let it through.
      await waitFor(async () => {
        const { rows: waiting } = await db.pool.query(
          `SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%WITH orphans AS%' AND query LIKE $1`,
          [`%${db.s}.jobs%`],
        );
        return waiting[0].n > 0;
      }, "the stop's last sweep");
      await locker.query('COMMIT');
      await stopped;
    } finally {
      await locker.query('ROLLBACK').catch(() => {});
    }
    const { rows: after } = await db.pool.query(`SELECT status, attempts, locked_by FROM ${db.s}.jobs WHERE id = $1`, [id]);
    expect(after[0]).toEqual({ status: 'pending', attempts: 0, locked_by: null });
  });
});

describe('a claim that waited on a table lock', () => {
  // Outside review 144: claims stamped locked_at with now(), the time the statement
  // arrived; behind a 10 s LOCK TABLE that lock was already older than the
  // visibility timeout when it committed, and the rescuer (waiting behind the same
  // lock) failed 20 single-attempt jobs as if their worker had died, unrun.
  type Path = 'claim' | 'cycle' | 'serial' | 'grouped';
  const claimBy: Record<Path, (store: PgWorkerStore) => Promise<JobRow[]>> = {
    claim: async (store) => (await store.cycle(plainClaim([]))).claimed,
    // A start to write for a job that is not there: enough to send the cycle, not the claim alone.
    cycle: async (store) => (await store.cycle(plainClaim(['0']))).claimed,
    // claim_queue() (claim_limited() for the serial one), both jobs into free slots.
    serial: async (store) => (await store.claimLimited('serial', ['t'], 2, 2)).jobs,
    grouped: async (store) => (await store.claimLimited('grouped', ['t'], 2, 2)).jobs,
  };
  function plainClaim(started: string[]): CycleRequest {
    return { completed: [], failed: [], started, queues: ['default'], tasks: ['t'], limit: 2, startNow: 1 };
  }

  it.each<[string, Path]>([
    ['the claim alone', 'claim'],
    ['the cycle (results written beside the claim)', 'cycle'],
    ['the claim of a queue with a concurrency limit', 'serial'],
    ['the claim of a grouped queue', 'grouped'],
  ])('stamps its locks and starts after the wait: %s', async (_, path) => {
    await db.pool.query(`DELETE FROM ${db.s}.jobs`);
    const queue = new Queue({ pool: db.pool, schema: db.schema });
    const name = path === 'serial' || path === 'grouped' ? path : 'default';
    if (path === 'serial') await queue.setQueueConcurrency('serial', 2);
    if (path === 'grouped') await setQueueGroups(db.pool, db.schema, 'grouped', { groupConcurrency: 5 });
    await queue.enqueueMany([1, 2].map(() => ({ task: 't', queue: name, ...(path === 'grouped' ? { group: 'g' } : {}) })));
    const app = `claim-wait-${path}-${db.schema}`.slice(0, 63);
    const driver = await openDriver('pg', { connectionString: db.url, statementTimeoutMs: 60_000 }, 1, app);
    try {
      const store = new PgWorkerStore(driver, db.schema, 'w-wait', true);
      await locker.query('BEGIN');
      await locker.query(`LOCK TABLE ${db.s}.jobs IN ACCESS EXCLUSIVE MODE`);
      const claim = claimBy[path](store);
      await waitFor(async () => (await lockWaiters(app)) === 1, 'the claim waiting for the lock');
      await new Promise((resolve) => setTimeout(resolve, 300));
      const { rows: at } = await locker.query<{ released: Date }>('SELECT clock_timestamp() AS released');
      await locker.query('COMMIT');
      const claimed = await claim;
      expect(claimed).toHaveLength(2);
      const released = at[0]!.released.getTime();
      const { rows } = await db.pool.query<{ id: string; locked_at: Date; updated_at: Date; started_at: Date | null }>(
        `SELECT id::text, locked_at, updated_at, started_at FROM ${db.s}.jobs ORDER BY id`,
      );
      for (const row of rows) {
        expect(row.locked_at.getTime()).toBeGreaterThanOrEqual(released);
        expect(row.updated_at.getTime()).toBe(row.locked_at.getTime());
      }
      // Started into free slots at the claim's time (the plain claims start one and claim
      // one ahead, the limited ones start both); the worker is told that same time.
      const starts = path === 'claim' || path === 'cycle' ? 1 : 2;
      expect(rows.filter((r) => r.started_at !== null).map((r) => r.started_at!.getTime())).toEqual(
        rows.slice(0, starts).map((r) => r.locked_at.getTime()),
      );
      for (const job of claimed) {
        const row = rows.find((r) => r.id === job.id)!;
        expect(job.locked_at?.getTime()).toBe(row.locked_at.getTime());
        expect(job.started_at?.getTime() ?? null).toBe(row.started_at?.getTime() ?? null);
      }
    } finally {
      await locker.query('ROLLBACK').catch(() => {});
      await driver.end();
      await queue.close();
    }
  });
});

describe('a hand-back whose reply was lost, tried again', () => {
  it('says the job was handed back, not taken away, once another worker has claimed it (outside review 147)', async () => {
    await db.pool.query(`DELETE FROM ${db.s}.jobs`);
    await db.pool.query(`INSERT INTO ${db.s}.jobs (task) VALUES ('t')`);
    const driver = await openDriver('pg', { connectionString: db.url, statementTimeoutMs: 60_000 }, 1, 'hand-back-twice');
    try {
      const first = new PgWorkerStore(driver, db.schema, 'w-first', true);
      const second = new PgWorkerStore(driver, db.schema, 'w-second', true);
      const claim = { completed: [], failed: [], started: [], queues: ['default'], tasks: ['t'], limit: 1, startNow: 1 };
      const [job] = (await first.cycle(claim)).claimed;
      const handedBack = await first.handBackAfterRestart(job!.id, 1, 'restart message', 'unanswered message');
      expect(handedBack).toEqual({ runAt: expect.any(Date), restarted: false });
      // Its reply lost, the worker tries again after another worker took the job.
      expect((await second.cycle(claim)).claimed.map((j) => j.id)).toEqual([job!.id]);
      expect(await first.handBackAfterRestart(job!.id, 1, 'restart message', 'unanswered message')).toEqual({
        runAt: null,
        restarted: false,
      });
      // Someone else's job that this worker never handed back is still "not mine".
      expect(await first.handBackAfterRestart(job!.id, 2, 'restart message', 'unanswered message')).toBeUndefined();
    } finally {
      await driver.end();
    }
  });

  it('a second unanswered outage in a row of the same job is charged, not told handed back (outside review 161)', async () => {
    await db.pool.query(`DELETE FROM ${db.s}.jobs`);
    await db.pool.query(`INSERT INTO ${db.s}.jobs (task) VALUES ('t')`);
    const driver = await openDriver('pg', { connectionString: db.url, statementTimeoutMs: 60_000 }, 1, 'hand-back-second');
    try {
      const store = new PgWorkerStore(driver, db.schema, 'w-again', true);
      const claim = { completed: [], failed: [], started: [], queues: ['default'], tasks: ['t'], limit: 1, startNow: 1 };
      const [job] = (await store.cycle(claim)).claimed;
      expect(await store.handBackAfterRestart(job!.id, 1, 'restart message', 'unanswered message')).toEqual({
        runAt: expect.any(Date),
        restarted: false,
      });
      // Claimed again by the same worker: the attempt given back, so numbered 1 again.
      const [again] = (await store.cycle(claim)).claimed;
      expect(again).toMatchObject({ id: job!.id, attempts: 1 });
      expect(await store.handBackAfterRestart(job!.id, 1, 'restart message', 'unanswered message')).toBe('refunded-before');
      const { rows } = await db.pool.query(`SELECT status, locked_by FROM ${db.s}.jobs WHERE id = $1`, [job!.id]);
      expect(rows).toEqual([{ status: 'processing', locked_by: 'w-again' }]);
    } finally {
      await driver.end();
    }
  });
});
