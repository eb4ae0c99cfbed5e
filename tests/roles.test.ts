import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DatabaseError, Queue, Worker, type SluiceError } from '../src/index.js';
import { createTestSchema, nextEvent, waitFor, type TestDatabase } from './helpers/database.js';

// sql/roles.sql applied with random role names (roles are cluster-wide, and the
// shared server is used by others), then exercised by logging in as each role.
let db: TestDatabase;
const tag = randomBytes(4).toString('hex');
const groups = { worker: `sluice_worker_${tag}`, enqueue: `sluice_enqueue_${tag}` };
const logins = { worker: `w_login_${tag}`, enqueue: `e_login_${tag}` };
const PASSWORD = `pw_${tag}`;
const cleanup: (() => Promise<void>)[] = [];

function urlAs(user: string): string {
  const url = new URL(db.url);
  url.username = user;
  url.password = PASSWORD;
  return url.toString();
}

beforeAll(async () => {
  db = await createTestSchema('roles');
  const script = (await readFile(new URL('../sql/roles.sql', import.meta.url), 'utf8'))
    .replaceAll(':SCHEMA', db.s)
    .replaceAll('sluice_worker', groups.worker)
    .replaceAll('sluice_enqueue', groups.enqueue);
  await db.pool.query(script);
  await db.pool.query(script); // re-running is harmless
  for (const kind of ['worker', 'enqueue'] as const) {
    await db.pool.query(`CREATE ROLE ${logins[kind]} LOGIN PASSWORD '${PASSWORD}' IN ROLE ${groups[kind]}`);
  }
});
afterAll(async () => {
  for (const fn of cleanup) await fn();
  for (const role of [...Object.values(logins), ...Object.values(groups)]) {
    await db.pool.query(`DROP OWNED BY ${role}`).catch(() => {});
    await db.pool.query(`DROP ROLE IF EXISTS ${role}`);
  }
  await db.drop();
});

describe('least-privilege roles (sql/roles.sql)', () => {
  it('the enqueue role can enqueue in every way, and nothing else', async () => {
    const queue = new Queue({ connectionString: urlAs(logins.enqueue), schema: db.schema });
    cleanup.push(() => queue.close());
    const id = await queue.enqueue('t', { a: 1 });
    const ids = await queue.enqueueMany([{ task: 't' }, { task: 't', queue: 'other' }]);
    const viaSql = await queue.pool!.query(`SELECT ${db.s}.enqueue_job('default', '{"task":"t"}') AS id`);
    const owner = await db.pool.query(`SELECT count(*)::int AS n FROM ${db.s}.jobs WHERE id = ANY($1::bigint[])`,
      [[id, ...ids, viaSql.rows[0].id]]);
    expect(owner.rows[0].n).toBe(4);
    // Job keys: the second enqueue finds the holder, 'replace' updates its payload.
    const keyed = await queue.enqueue('t', { v: 1 }, { jobKey: `k-${tag}` });
    expect(await queue.enqueue('t', { v: 2 }, { jobKey: `k-${tag}` })).toBe(keyed);
    expect(await queue.enqueue('t', { v: 3 }, { jobKey: `k-${tag}`, jobKeyMode: 'replace' })).toBe(keyed);
    const held = await db.pool.query(`SELECT payload FROM ${db.s}.jobs WHERE id = $1`, [keyed]);
    expect(held.rows[0].payload).toEqual({ v: 3 });

    for (const sql of [
      `SELECT payload FROM ${db.s}.jobs`,
      `UPDATE ${db.s}.jobs SET status = 'completed'`,
      `DELETE FROM ${db.s}.jobs`,
      `SELECT * FROM ${db.s}.leader`,
    ]) {
      await expect(queue.pool!.query(sql), sql).rejects.toMatchObject({ code: '42501' });
    }
    // A worker with this role cannot claim: it reports a typed DatabaseError and keeps going.
    const worker = new Worker({ connectionString: urlAs(logins.enqueue), schema: db.schema, queues: ['none'], tasks: { t: () => {} } });
    const errors: SluiceError[] = [];
    worker.on('error', (err) => errors.push(err));
    await worker.start();
    await waitFor(() => errors.length > 0, 'the claim to be refused');
    await worker.stop();
    expect(errors[0]).toBeInstanceOf(DatabaseError);
    expect((errors[0] as DatabaseError).sqlState).toBe('42501');
  });

  it('the worker role claims (also from a limited queue), heartbeats, completes, fails and holds the maintenance lease, but cannot add or delete jobs', async () => {
    const ok = await db.pool.query(`INSERT INTO ${db.s}.jobs (queue, task) VALUES ('w', 'ok'), ('w', 'boom') RETURNING id::text`);
    // A concurrency limit sends the claim through claim_limited(), which locks the queue's row.
    await db.pool.query(`INSERT INTO ${db.s}.queues (name, concurrency_limit) VALUES ('w', 5)`);
    const worker = new Worker({
      connectionString: urlAs(logins.worker),
      schema: db.schema,
      queues: ['w'],
      heartbeatIntervalMs: 100,
      maintenance: { pruner: false },
      tasks: {
        ok: async () => { await new Promise((r) => setTimeout(r, 300)); }, // long enough for heartbeats
        boom: () => { throw new Error('boom'); },
      },
    });
    const errors: SluiceError[] = [];
    worker.on('error', (err) => errors.push(err));
    const elected = nextEvent(worker, 'leader:elected');
    await worker.start();
    await elected;
    await waitFor(async () => {
      const { rows } = await db.pool.query(`SELECT status FROM ${db.s}.jobs WHERE id = ANY($1::bigint[]) ORDER BY id`,
        [ok.rows.map((r) => r.id)]);
      return rows.map((r) => r.status).join() === 'completed,pending';
    }, 'one completed, one failed and waiting for its retry');
    await worker.stop();
    expect(errors).toEqual([]);

    const queue = new Queue({ connectionString: urlAs(logins.worker), schema: db.schema });
    cleanup.push(() => queue.close());
    await expect(queue.enqueue('t')).rejects.toMatchObject({ code: 'DATABASE', sqlState: '42501' });
    await expect(queue.pool!.query(`DELETE FROM ${db.s}.jobs`)).rejects.toMatchObject({ code: '42501' });
  });
});
