import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { pgDriver, type PgDriver } from '../src/db/drivers/pg.js';
import { createTestSchema, type TestDatabase } from './helpers/database.js';
import { startTcpProxy, type TcpProxy } from './helpers/tcp-proxy.js';

// The pg driver on a pool of the user's, which puts no 'error' listener on the
// clients it hands out: a connection terminated as it opens must fail the
// statement that wanted it, never end the process (outside review 49: a worker
// died of an unhandled 'error' while its backends were being terminated).

let db: TestDatabase;
let proxy: TcpProxy;
let pool: pg.Pool;
let driver: PgDriver;
const uncaught: unknown[] = [];
const onUncaught = (err: unknown) => uncaught.push(err);

beforeAll(async () => {
  db = await createTestSchema('pg_driver');
  proxy = await startTcpProxy(db.url);
  process.on('uncaughtException', onUncaught);
});

afterAll(async () => {
  process.off('uncaughtException', onUncaught);
  await proxy.close();
  await db.drop();
});

afterEach(async () => {
  uncaught.length = 0;
  await driver.end();
  await pool.end();
});

/** A pool as users make it: an 'error' listener on the pool, none on its clients. */
function userPool(): void {
  pool = new pg.Pool({ connectionString: proxy.url, max: 2 });
  pool.on('error', () => {});
  driver = pgDriver({ pool, max: 2, applicationName: 'sluice-test', statementTimeoutMs: 5_000 });
}

/** Lets a socket's pending events run: an unhandled 'error' would surface here. */
const settle = () => new Promise((resolve) => setTimeout(resolve, 100));

describe('a connection terminated in the packet that says it is ready', () => {
  it('fails the statement that wanted it, and the next one gets a new connection', async () => {
    userPool();
    const terminated = proxy.terminateAtReady();
    await expect(driver.query('SELECT 1 AS one')).rejects.toThrow();
    await terminated;
    await settle();
    expect(uncaught).toEqual([]);
    const { rows } = await driver.query('SELECT 1 AS one');
    expect(rows).toEqual([{ one: 1 }]);
  });

  it('fails a transaction that wanted it, and the next one commits', async () => {
    userPool();
    const terminated = proxy.terminateAtReady();
    await expect(driver.transaction((tx) => tx.query('SELECT 1'))).rejects.toThrow();
    await terminated;
    await settle();
    expect(uncaught).toEqual([]);
    await expect(driver.transaction(async (tx) => (await tx.query('SELECT 2 AS two')).rows)).resolves.toEqual([{ two: 2 }]);
  });

  it('fails a LISTEN that wanted it, and the next LISTEN hears notifications', async () => {
    userPool();
    const terminated = proxy.terminateAtReady();
    const handlers = { notification: () => {}, lost: () => {} };
    await expect(driver.listen('pg_driver_test', handlers)).rejects.toThrow();
    await terminated;
    await settle();
    expect(uncaught).toEqual([]);
    const heard: (string | undefined)[] = [];
    const listening = await driver.listen('pg_driver_test', { notification: (p) => heard.push(p), lost: () => {} });
    await db.pool.query(`SELECT pg_notify('pg_driver_test', 'hello')`);
    await expect.poll(() => heard).toEqual(['hello']);
    await listening.close();
  });
});
