import { randomBytes } from 'node:crypto';
import pg from 'pg';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ConfigError,
  DuplicateJobError,
  Queue,
  Worker,
  cancelJob,
  deleteFinished,
  getJob,
  getStats,
  listDeadLetters,
  listJobs,
  migrate,
  redriveDeadLetters,
  retryJob,
  runDoctor,
} from '../src/index.js';
import type { Driver } from '../src/db/driver.js';
import { openDriver } from '../src/db/drivers/open.js';
import { postgresJsAdapter } from '../src/db/adapters/postgres-js.js';
import { channelFor, quoteSchema } from '../src/db/identifiers.js';
import { loadMigrations } from '../src/migrate.js';
import { decodeMessage, type WakeHint } from '../src/notify/codec.js';
import { startDashboard } from '../src/dashboard/server.js';
import { openEventStream } from './helpers/sse.js';
import { createTestSchema, statusCounts, waitFor, type TestDatabase } from './helpers/database.js';

// Queue, migrate and the admin API on postgres.js (the worker's own tests run on
// it too, see vitest.config.ts). Assertions on the database go through pg.

let db: TestDatabase;
let sql: postgres.Sql;
let queue: Queue;
let driver: Driver;

beforeAll(async () => {
  db = await createTestSchema('drivers');
  await db.pool.query(`CREATE TABLE ${db.s}.users (id serial PRIMARY KEY, email text NOT NULL UNIQUE)`);
  sql = postgres(db.url, { max: 2, onnotice: () => {} });
  queue = new Queue({ sql, schema: db.schema });
  driver = await openDriver('postgres.js', { connectionString: db.url }, 2, 'sluice-test');
});
afterAll(async () => {
  await queue?.close();
  await driver?.end();
  await sql?.end();
  await db?.drop();
});

describe('migrate on postgres.js', () => {
  it("applies every migration once, also when two callers race, and leaves the caller's sql open", async () => {
    const schema = `t_drivers_migrate_${randomBytes(4).toString('hex')}`;
    try {
      const migrations = await loadMigrations();
      const newest = migrations.at(-1)!.version;
      const [a, b] = await Promise.all([
        migrate({ sql, schema }),
        migrate({ connectionString: db.url, driver: 'postgres.js', schema }),
      ]);
      // Versions need not be contiguous (one was left unused): count the files.
      expect([a.applied.length, b.applied.length].sort()).toEqual([0, migrations.length]);
      expect(a.version).toBe(newest);
      expect(b.version).toBe(newest);
      expect(await migrate({ sql, schema })).toEqual({ schema, applied: [], version: newest });
      // The schema works: a job goes in through the functions the migrations made.
      const { rows } = await db.pool.query(`SELECT ${quoteSchema(schema)}.enqueue_job('default', '{"task":"t"}') AS id`);
      expect(rows[0].id).toBeTruthy();
      expect(await sql`SELECT 1 AS one`).toEqual([{ one: 1 }]);
    } finally {
      await db.pool.query(`DROP SCHEMA IF EXISTS ${quoteSchema(schema)} CASCADE`);
    }
  });

  it('refuses contradicting options with a ConfigError', async () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 1 });
    try {
      await expect(migrate({ sql, pool })).rejects.toBeInstanceOf(ConfigError);
      await expect(migrate({ sql, driver: 'pg' })).rejects.toBeInstanceOf(ConfigError);
      await expect(migrate({ pool, driver: 'postgres.js' })).rejects.toBeInstanceOf(ConfigError);
      await expect(migrate({ driver: 'postgres.js' })).rejects.toBeInstanceOf(ConfigError);
      await expect(migrate({ connectionString: db.url, driver: 'mysql' as never })).rejects.toBeInstanceOf(ConfigError);
      expect(() => new Queue({ sql, pool })).toThrow(ConfigError);
      expect(() => new Queue({ sql: {} as never })).toThrow(ConfigError);
      // Both a URL and a pool, or a pool that is not one (outside review 126: the Worker took them).
      const tasks = { t: async () => {} };
      expect(() => new Worker({ pool, connectionString: db.url, tasks })).toThrow(
        'Worker: give connectionString, pool or sql, one of them',
      );
      expect(() => new Worker({ pool: {} as never, tasks })).toThrow('Worker: pool must be a pg Pool (a Client goes in as tx)');
      expect(() => new Queue({ pool, connectionString: db.url })).toThrow(
        'Queue: give connectionString, pool or sql, one of them',
      );
      expect(() => new Queue({ pool: {} as never })).toThrow('Queue: pool must be a pg Pool');
      // A Client (outside review 127), and a postgres.js instance beside a URL.
      expect(() => new Queue({ pool: new pg.Client({ connectionString: db.url }) as never })).toThrow(
        'Queue: pool must be a pg Pool (a Client goes in as tx)',
      );
      expect(() => new Queue({ sql, connectionString: db.url })).toThrow(
        'Queue: give connectionString, pool or sql, one of them',
      );
    } finally {
      await pool.end();
    }
  });
});

describe('Queue on postgres.js', () => {
  it('enqueues and reads back jobs with every option, and has no pg pool', async () => {
    expect(queue.pool).toBeUndefined();
    const runAt = new Date(Date.now() + 3_600_000);
    const id = await queue.enqueue(
      'send',
      { to: 'a@example.com', n: [1, 2], nested: { ok: true } },
      {
        queue: 'mail',
        runAt,
        maxAttempts: 3,
        priority: 7,
      },
    );
    const job = await queue.getJob(id);
    expect(job).toMatchObject({
      id,
      task: 'send',
      queue: 'mail',
      status: 'pending',
      max_attempts: 3,
      priority: 7,
      payload: { to: 'a@example.com', n: [1, 2], nested: { ok: true } },
    });
    expect(job!.run_at).toEqual(runAt);
    // The payload is stored as a JSON object, not as a JSON string of it.
    const { rows } = await db.pool.query(`SELECT jsonb_typeof(payload) AS t FROM ${db.s}.jobs WHERE id = $1`, [id]);
    expect(rows[0].t).toBe('object');
  });

  it('enqueueMany inserts a batch in order, keyed or not', async () => {
    const ids = await queue.enqueueMany([
      { task: 'a', payload: { i: 0 } },
      { task: 'b', payload: 'text', queue: 'other', delayMs: 60_000 },
      { task: 'c', payload: [1, 'two'], runAt: new Date('2030-01-01T00:00:00Z') },
    ]);
    expect(ids).toHaveLength(3);
    const jobs = await Promise.all(ids.map((id) => queue.getJob(id)));
    expect(jobs.map((j) => [j!.task, j!.payload])).toEqual([
      ['a', { i: 0 }],
      ['b', 'text'],
      ['c', [1, 'two']],
    ]);
    expect(jobs[2]!.run_at).toEqual(new Date('2030-01-01T00:00:00Z'));

    const keyed = await queue.enqueueMany([
      { task: 'k', jobKey: 'drivers-k1' },
      { task: 'k', jobKey: 'drivers-k2' },
    ]);
    expect(await queue.enqueueMany([{ task: 'k', jobKey: 'drivers-k1' }])).toEqual([keyed[0]]);
  });

  it('turns a held job key into a DuplicateJobError', async () => {
    const first = await queue.enqueue('unique', {}, { jobKey: 'drivers-dup', jobKeyMode: 'error' });
    const err = await queue.enqueue('unique', {}, { jobKey: 'drivers-dup', jobKeyMode: 'error' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DuplicateJobError);
    expect((err as DuplicateJobError).existingId).toBe(first);
  });

  it("enqueues in the caller's sql.begin transaction through the postgres.js adapter: commit and rollback", async () => {
    const committed = await sql.begin(async (tx) => {
      await tx.unsafe(`INSERT INTO ${db.s}.users (email) VALUES ($1)`, ['kept@example.com']);
      const id = await queue.enqueue('welcome', { email: 'kept@example.com' }, { tx: postgresJsAdapter(tx) });
      const [more] = await queue.enqueueMany([{ task: 'welcome_batch' }], { tx: postgresJsAdapter(tx) });
      // Visible inside the transaction, not outside it yet.
      expect(await queue.getJob(id, { tx: postgresJsAdapter(tx) })).toMatchObject({ status: 'pending' });
      expect(await queue.getJob(id)).toBeUndefined();
      return [id, more!];
    });
    for (const id of committed) expect(await queue.getJob(id)).toMatchObject({ status: 'pending' });

    let rolledBack: string | undefined;
    await expect(
      sql.begin(async (tx) => {
        await tx.unsafe(`INSERT INTO ${db.s}.users (email) VALUES ($1)`, ['gone@example.com']);
        rolledBack = await queue.enqueue('welcome', { email: 'gone@example.com' }, { tx: postgresJsAdapter(tx) });
        throw new Error('abort');
      }),
    ).rejects.toThrow('abort');
    expect(await queue.getJob(rolledBack!)).toBeUndefined();
    const { rows } = await db.pool.query(`SELECT email FROM ${db.s}.users ORDER BY email`);
    expect(rows.map((r) => r.email)).toEqual(['kept@example.com']);
  });

  it('enqueues in a Driver transaction: commit and rollback', async () => {
    const id = await driver.transaction((tx) => queue.enqueue('in_driver_tx', { ok: 1 }, { tx }));
    expect(await queue.getJob(id)).toMatchObject({ task: 'in_driver_tx', payload: { ok: 1 } });

    let lost: string | undefined;
    await expect(
      driver.transaction(async (tx) => {
        lost = await queue.enqueue('in_driver_tx', {}, { tx });
        throw new Error('abort');
      }),
    ).rejects.toThrow('abort');
    expect(await queue.getJob(lost!)).toBeUndefined();
  });

  it('wakes every queue of concurrent enqueues, including the wake-ups sent after COMMIT', async () => {
    const listener = new pg.Client({ connectionString: db.url });
    await listener.connect();
    const woken = new Set<string>();
    listener.on('notification', (msg) => {
      const hint = decodeMessage(msg.payload);
      if ('queue' in hint) woken.add((hint as WakeHint).queue);
    });
    try {
      await listener.query(`LISTEN "${channelFor(db.schema)}"`);
      // All but the first run while another is in flight, so their wake-up is deferred past the COMMIT.
      const queues = ['w0', 'w1', 'w2', 'w3', 'w4'];
      await Promise.all(queues.map((q) => queue.enqueue('wake', {}, { queue: q })));
      await waitFor(() => queues.every((q) => woken.has(q)), `wake-ups for ${queues.join(', ')}`, 5_000);
    } finally {
      await listener.end();
    }
  });

  it('waitFor is woken by the outcome notification over its postgres.js LISTEN', async () => {
    // Cancelling finishes the job and notifies its waiters; the poll is an hour away.
    const id = await queue.enqueue('never_run', {}, { queue: 'nobody' });
    const waiting = queue.waitFor(id, { timeoutMs: 15_000, pollIntervalMs: 3_600_000 });
    await waitFor(
      async () =>
        (await db.pool.query(`SELECT notify_on_finish FROM ${db.s}.jobs WHERE id = $1`, [id])).rows[0]?.notify_on_finish,
      'the job to be watched',
    );
    expect(await queue.cancel(id)).toMatchObject({ ok: true });
    expect(await waiting).toMatchObject({ id, status: 'cancelled' });
    const { rows } = await db.pool.query(
      `SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'sluice-listen' AND query ILIKE $1`,
      [`%LISTEN%${db.schema}:done%`],
    );
    expect(rows[0].n).toBe(1);
  });

  it('waitFor returns the result of a job run by a worker on postgres.js', async () => {
    const worker = new Worker({
      sql,
      schema: db.schema,
      queues: ['work'],
      pollIntervalMs: 3_600_000,
      tasks: { double: async ({ n }: { n: number }) => ({ doubled: n * 2 }) },
    });
    worker.on('error', () => {});
    await worker.start();
    try {
      const id = await queue.enqueue('double', { n: 21 }, { queue: 'work' });
      expect(await queue.waitFor(id, { timeoutMs: 15_000, pollIntervalMs: 3_600_000 })).toMatchObject({
        status: 'completed',
        result: { doubled: 42 },
      });
    } finally {
      await worker.stop();
    }
  });

  it("close() leaves the caller's sql open", async () => {
    const own = new Queue({ sql, schema: db.schema });
    await own.enqueue('t');
    await own.close();
    expect(await sql`SELECT 2 AS two`).toEqual([{ two: 2 }]);
  });

  it("a Queue from a connection string with driver 'postgres.js' works, and closes whether it was used or not", async () => {
    const lazy = new Queue({ connectionString: db.url, driver: 'postgres.js', schema: db.schema });
    await lazy.close();
    const used = new Queue({ connectionString: db.url, driver: 'postgres.js', schema: db.schema });
    try {
      expect(await used.getJob(await used.enqueue('t'))).toMatchObject({ task: 't' });
    } finally {
      await used.close();
    }
  });
});

describe('the admin API on postgres.js', () => {
  it('lists, reads, retries, cancels, redrives and deletes through a Driver and through the adapter', async () => {
    await db.pool.query(`TRUNCATE ${db.s}.jobs`);
    const ids = await queue.enqueueMany([
      { task: 'a', queue: 'adm' },
      { task: 'b', queue: 'adm' },
      { task: 'c', queue: 'adm' },
    ]);
    await db.pool.query(
      `UPDATE ${db.s}.jobs SET status = 'failed', finished_at = now(), attempts = max_attempts WHERE id = ANY($1::bigint[])`,
      [ids.slice(0, 2)],
    );

    for (const admin of [driver, postgresJsAdapter(sql)]) {
      const page = await listJobs(admin, db.schema, { queue: 'adm', status: 'failed' });
      expect(page.jobs.map((j) => j.id).sort()).toEqual(ids.slice(0, 2).sort());
      expect((await getJob(admin, db.schema, ids[2]!))?.status).toBe('pending');
      expect((await listDeadLetters(admin, db.schema, { queue: 'adm' })).jobs).toHaveLength(2);
      const stats = await getStats(admin, db.schema);
      expect(stats.queues.find((q) => q.queue === 'adm')).toBeTruthy();
    }

    expect(await retryJob(driver, db.schema, ids[0]!)).toMatchObject({ ok: true });
    expect(await redriveDeadLetters(postgresJsAdapter(sql), db.schema, { ids: [ids[1]!] })).toMatchObject({
      redriven: 1,
      skipped: [],
    });
    expect(await cancelJob(driver, db.schema, ids[2]!)).toMatchObject({ ok: true });
    expect(await statusCounts(db)).toEqual({ pending: 2, cancelled: 1 });
    expect(await deleteFinished(driver, db.schema, { olderThanMs: 0, statuses: ['cancelled'] })).toEqual({ deleted: 1 });
    expect(await statusCounts(db)).toEqual({ pending: 2 });
  });

  it('runDoctor and queue controls run on postgres.js', async () => {
    // The same checks as on pg (their numbers depend on what else runs right then).
    const onPg = await runDoctor({ pool: db.pool, schema: db.schema });
    const onPostgresJs = await runDoctor({ sql, schema: db.schema });
    expect(onPostgresJs.checks.map((c) => c.id)).toEqual(onPg.checks.map((c) => c.id));
    const ofSchema = (r: typeof onPg) =>
      r.checks.filter((c) => ['backlog', 'stuck', 'maintenance'].includes(c.id)).map((c) => [c.id, c.status, c.details.length]);
    expect(ofSchema(onPostgresJs)).toEqual(ofSchema(onPg));
    expect(await queue.pauseQueue('adm')).toMatchObject({ name: 'adm', paused: true });
    expect(await queue.setQueueConcurrency('adm', 2)).toMatchObject({ name: 'adm', concurrencyLimit: 2 });
    expect((await queue.listQueues()).find((q) => q.name === 'adm')).toMatchObject({ paused: true });
    expect(await queue.resumeQueue('adm')).toMatchObject({ paused: false });
  });
});

describe('the dashboard on postgres.js', () => {
  it('serves jobs and health, and its live feed hears enqueues over its postgres.js LISTEN', async () => {
    const dash = await startDashboard({ sql, schema: db.schema, port: 0, refreshMs: 3_600_000 });
    const events = await openEventStream(new URL('api/events', dash.url).href);
    try {
      await events.next('overview');
      await waitFor(
        async () =>
          (
            await db.pool.query(
              `SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'sluice-listen' AND query = $1`,
              [`LISTEN "sluice:${db.schema}"`],
            )
          ).rows[0].n === 1,
        'the dashboard to LISTEN',
      );
      const id = await queue.enqueue('shown', { x: 1 }, { queue: 'dash' });
      expect(await events.next('jobs', (d) => d.queue === 'dash')).toEqual({ queue: 'dash' });

      const jobs = (await (await fetch(new URL('api/jobs?queue=dash', dash.url))).json()) as { jobs: { id: string }[] };
      expect(jobs.jobs.map((j) => j.id)).toEqual([id]);
      const one = (await (await fetch(new URL(`api/jobs/${id}`, dash.url))).json()) as { job: unknown };
      expect(one.job).toMatchObject({ id, payload: { x: 1 } });
      expect((await fetch(new URL('api/health', dash.url))).status).toBe(200);
    } finally {
      events.close();
      await dash.close();
    }
  });
});
