import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConnectionError } from '../src/index.js';
import type { DriverName } from '../src/db/driver.js';
import { openDriver } from '../src/db/drivers/open.js';
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

describe.each<DriverName>(['pg', 'postgres.js'])('a statement past its limit on the %s driver', (name) => {
  it('is cancelled in Postgres: it never runs after its caller got the error', async () => {
    const n = name === 'pg' ? 1 : 2;
    const driver = await openDriver(name, { connectionString: db.url, statementTimeoutMs: 500 }, 2, `sluice-cancel-${n}`);
    try {
      await driver.query('SELECT 1'); // connected: the limit below is the statement's alone
      await locker.query('BEGIN');
      await locker.query(`LOCK TABLE ${db.s}.t IN ACCESS EXCLUSIVE MODE`);
      await expect(driver.query(`INSERT INTO ${db.s}.t VALUES (${n})`)).rejects.toBeInstanceOf(ConnectionError);
      // Cancelled, the session stops waiting for the lock at once.
      await waitFor(
        async () => (await lockWaiters(`sluice-cancel-${n}`)) === 0,
        'no session of the driver left waiting for the lock',
      );
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
    const app = `sluice-abort-${n}`;
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
