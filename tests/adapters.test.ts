import 'reflect-metadata';
import { inspect } from 'node:util';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import postgres from 'postgres';
import { Kysely, PostgresDialect } from 'kysely';
import { pgSchema, serial, text } from 'drizzle-orm/pg-core';
import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import { drizzle as drizzlePostgresJs } from 'drizzle-orm/postgres-js';
import knex from 'knex';
import { DataSource, EntitySchema as TypeOrmEntity } from 'typeorm';
import { MikroORM, EntitySchema as MikroEntity } from '@mikro-orm/postgresql';
import { PrismaPg } from '@prisma/adapter-pg';
import { PrismaClient } from './prisma/generated/client.js';
import {
  ConfigError,
  ConnectionError,
  DuplicateJobError,
  Outbox,
  Queue,
  Worker,
  retryJob,
  runJobNow,
  type Queryable,
} from '../src/index.js';
import { channelFor } from '../src/db/identifiers.js';
import { postgresJsAdapter } from '../src/db/adapters/postgres-js.js';
import { kyselyAdapter } from '../src/db/adapters/kysely.js';
import { drizzleAdapter } from '../src/db/adapters/drizzle.js';
import { knexAdapter } from '../src/db/adapters/knex.js';
import { typeormAdapter } from '../src/db/adapters/typeorm.js';
import { mikroOrmAdapter } from '../src/db/adapters/mikro-orm.js';
import { prismaAdapter } from '../src/db/adapters/prisma.js';
import { createTestSchema, waitFor, type TestDatabase } from './helpers/database.js';
import { TEST_DRIVER } from './helpers/driver.js';
import { startGate } from './helpers/tcp-gate.js';

/** What a test does inside the library's transaction. */
interface InTransaction {
  /** The library's transaction, adapted for Sluice. */
  tx: Queryable;
  /** Inserts the business row with the library's own API, in the same transaction. */
  insertUser(name: string): Promise<void>;
}

/** One library: open it, run a callback in its transaction (commit on return, roll back on throw). */
interface Library {
  transaction(fn: (t: InTransaction) => Promise<void>): Promise<void>;
  close(): Promise<void>;
}

let db: TestDatabase;
let queue: Queue;
const workers: Worker[] = [];

beforeAll(async () => {
  db = await createTestSchema('adapters');
  await db.pool.query(`CREATE TABLE ${db.s}.users (id serial PRIMARY KEY, name text NOT NULL UNIQUE)`);
  queue = new Queue({ pool: db.pool, schema: db.schema });
});
afterEach(async () => {
  await Promise.all(workers.splice(0).map((w) => w.stop()));
});
afterAll(async () => {
  await queue.close();
  await db.drop();
});

const LIBRARIES: Record<string, () => Promise<Library>> = {
  'postgres.js': async () => {
    const sql = postgres(db.url, { max: 2, onnotice: () => {} });
    return {
      transaction: async (fn) => {
        await sql.begin((tx) =>
          fn({
            tx: postgresJsAdapter(tx),
            insertUser: async (name) => void (await tx`INSERT INTO ${tx(db.schema)}.users (name) VALUES (${name})`),
          }),
        );
      },
      close: () => sql.end(),
    };
  },
  kysely: async () => {
    const kdb = new Kysely<any>({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: db.url, max: 2 }) }) });
    return {
      transaction: (fn) =>
        kdb.transaction().execute((trx) =>
          fn({
            tx: kyselyAdapter(trx),
            insertUser: async (name) => void (await trx.withSchema(db.schema).insertInto('users').values({ name }).execute()),
          }),
        ),
      close: () => kdb.destroy(),
    };
  },
  'drizzle (node-postgres)': async () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 2 });
    const ddb = drizzlePg(pool);
    const users = drizzleUsers();
    return {
      transaction: (fn) =>
        ddb.transaction((tx) =>
          fn({
            tx: drizzleAdapter(tx),
            insertUser: async (name) => void (await tx.insert(users).values({ name })),
          }),
        ),
      close: () => pool.end(),
    };
  },
  'drizzle (postgres-js)': async () => {
    const sql = postgres(db.url, { max: 2, onnotice: () => {} });
    const ddb = drizzlePostgresJs(sql);
    const users = drizzleUsers();
    return {
      transaction: (fn) =>
        ddb.transaction((tx) =>
          fn({
            tx: drizzleAdapter(tx),
            insertUser: async (name) => void (await tx.insert(users).values({ name })),
          }),
        ),
      close: () => sql.end(),
    };
  },
  knex: async () => {
    const k = knex({ client: 'pg', connection: db.url, pool: { min: 0, max: 2 } });
    return {
      transaction: (fn) =>
        k.transaction((trx) =>
          fn({
            tx: knexAdapter(trx),
            insertUser: async (name) => void (await trx.withSchema(db.schema).table('users').insert({ name })),
          }),
        ),
      close: () => k.destroy(),
    };
  },
  'typeorm (EntityManager)': async () => {
    const ds = await typeormDataSource();
    return {
      transaction: (fn) =>
        ds.transaction((manager) =>
          fn({
            tx: typeormAdapter(manager),
            insertUser: async (name) => void (await manager.insert('User', { name })),
          }),
        ),
      close: () => ds.destroy(),
    };
  },
  'typeorm (QueryRunner)': async () => {
    const ds = await typeormDataSource();
    return {
      transaction: async (fn) => {
        const runner = ds.createQueryRunner();
        await runner.startTransaction();
        try {
          await fn({
            tx: typeormAdapter(runner),
            insertUser: async (name) => void (await runner.manager.insert('User', { name })),
          });
          await runner.commitTransaction();
        } catch (err) {
          await runner.rollbackTransaction();
          throw err;
        } finally {
          await runner.release();
        }
      },
      close: () => ds.destroy(),
    };
  },
  'mikro-orm': async () => {
    const { orm, User } = await mikroOrm();
    return {
      transaction: (fn) =>
        orm.em.fork().transactional((em) =>
          fn({
            tx: mikroOrmAdapter(em),
            insertUser: async (name) => {
              em.persist(em.create(User, { name }));
              await em.flush();
            },
          }),
        ),
      close: () => orm.close(),
    };
  },
  prisma: async () => {
    // Prisma through its pg driver adapter (no engine binary); the table is in this file's schema.
    const prisma = new PrismaClient({ adapter: new PrismaPg({ connectionString: db.url, max: 2 }, { schema: db.schema }) });
    return {
      transaction: (fn) =>
        prisma.$transaction((tx) =>
          fn({
            tx: prismaAdapter(tx),
            insertUser: async (name) => void (await tx.user.create({ data: { name } })),
          }),
        ),
      close: () => prisma.$disconnect(),
    };
  },
};

/** MikroORM on this file's users table. */
async function mikroOrm() {
  const User = new MikroEntity<{ id: number; name: string }>({
    name: 'User',
    schema: db.schema,
    tableName: 'users',
    properties: { id: { type: 'number', primary: true }, name: { type: 'string' } },
  });
  const orm = await MikroORM.init({ clientUrl: db.url, entities: [User], pool: { min: 0, max: 2 }, debug: false });
  return { orm, User };
}

function drizzleUsers() {
  return pgSchema(db.schema).table('users', { id: serial('id').primaryKey(), name: text('name').notNull() });
}

async function typeormDataSource(): Promise<DataSource> {
  const User = new TypeOrmEntity<{ id: number; name: string }>({
    name: 'User',
    tableName: 'users',
    schema: db.schema,
    columns: { id: { type: Number, primary: true, generated: true }, name: { type: String } },
  });
  return new DataSource({ type: 'postgres', url: db.url, entities: [User], poolSize: 2 }).initialize();
}

async function usersNamed(prefix: string): Promise<string[]> {
  const { rows } = await db.pool.query(`SELECT name FROM ${db.s}.users WHERE name LIKE $1 || '%' ORDER BY name`, [prefix]);
  return rows.map((r) => r.name);
}

async function jobsIn(queueName: string): Promise<{ status: string; payload: { name: string } }[]> {
  const { rows } = await db.pool.query(`SELECT status, payload FROM ${db.s}.jobs WHERE queue = $1 ORDER BY id`, [queueName]);
  return rows;
}

/** Enqueues one job and a batch of two, for user `name`, on the library's own queue. */
async function enqueueFor(tx: Queryable, queueName: string, name: string): Promise<void> {
  await queue.enqueue('welcome', { name }, { queue: queueName, tx });
  await queue.enqueueMany(
    [
      { task: 'welcome', payload: { name: `${name}/a` }, queue: queueName },
      { task: 'welcome', payload: { name: `${name}/b` }, queue: queueName },
    ],
    { tx },
  );
}

describe.each(Object.keys(LIBRARIES))('enqueue inside a %s transaction', (libName) => {
  let lib: Library;
  const q = `lib-${libName}`;
  beforeAll(async () => {
    lib = await LIBRARIES[libName]!();
  });
  afterAll(async () => {
    await lib.close();
  });

  it('commit: the row and the jobs exist together, and a worker runs the jobs', async () => {
    const name = `${libName}:committed`;
    await lib.transaction(async ({ tx, insertUser }) => {
      await insertUser(name);
      await enqueueFor(tx, q, name);
      // Outside the transaction nothing is visible yet.
      expect(await jobsIn(q)).toEqual([]);
    });
    expect(await usersNamed(name)).toEqual([name]);
    expect((await jobsIn(q)).map((j) => j.payload.name)).toEqual([name, `${name}/a`, `${name}/b`]);

    const seen: string[] = [];
    const worker = new Worker({
      connectionString: db.url,
      schema: db.schema,
      driver: TEST_DRIVER,
      queues: [q],
      tasks: { welcome: async (payload: { name: string }) => void seen.push(payload.name) },
    });
    worker.on('error', () => {});
    workers.push(worker);
    await worker.start();
    await waitFor(async () => (await jobsIn(q)).every((j) => j.status === 'completed'), 'the jobs to complete');
    expect(seen.sort()).toEqual([name, `${name}/a`, `${name}/b`]);
  });

  it("a held key in mode 'error' is a DuplicateJobError naming the holder, one at a time or in a batch (outside review 229: through Prisma a DatabaseError)", async () => {
    const key = `held-${libName}`;
    const holder = await queue.enqueue('welcome', { name: 'holder' }, { queue: `${q}-keys`, jobKey: key });
    for (const enqueue of [
      (tx: Queryable) =>
        queue.enqueue('welcome', { name: 'again' }, { queue: `${q}-keys`, jobKey: key, jobKeyMode: 'error', tx }),
      (tx: Queryable) =>
        queue.enqueueMany(
          [{ task: 'welcome', payload: { name: 'again' }, queue: `${q}-keys`, jobKey: key, jobKeyMode: 'error' }],
          {
            tx,
          },
        ),
    ]) {
      const err = await lib
        .transaction(async ({ tx }) => {
          await enqueue(tx);
        })
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(DuplicateJobError);
      expect(err).toMatchObject({ existingId: holder, jobKey: key });
      // Postgres's words only: not the statement, nor the payload in it (outside review 229: MikroORM and Knex).
      expect((err as Error).message).toMatch(/^enqueue(Many)? failed: enqueue_job: job \d+ already holds key/);
      expect((err as Error).message).not.toMatch(/INSERT|SELECT|again/);
      // Nor in what a logger prints of it, its cause included (outside review 231: MikroORM's stack, TypeORM's parameters).
      expect(inspect(err, { depth: 5 })).not.toMatch(/"again"|'again'/);
    }
    expect(await jobsIn(`${q}-keys`)).toHaveLength(1);
  });

  it('passes parameters by number (reused, next to a literal ?) and returns rows as objects', async () => {
    let rows: unknown[] = [];
    await lib.transaction(async ({ tx }) => {
      ({ rows } = await tx.query(`SELECT $2::text AS a, '?' AS q, $1::int AS n, $2::text AS b`, [7, 'x']));
    });
    expect(rows).toEqual([{ a: 'x', q: '?', n: 7, b: 'x' }]);
  });

  it('array, JSON and void parameters and results pass: cancel, getJob, publishMany, headers, lockKeys (outside review 212)', async () => {
    const outbox = new Outbox({ pool: db.pool, schema: db.schema });
    const d = `adapters.${libName}`;
    let job: Awaited<ReturnType<Queue['getJob']>>;
    let cancelled: Awaited<ReturnType<Queue['cancel']>> | undefined;
    await lib.transaction(async ({ tx }) => {
      // First: keys are locked before the transaction writes anything.
      await outbox.lockKeys(['k1', 'k2'], { tx });
      await outbox.publish(d, { n: 1 }, { tx, key: 'k1', headers: { 'x-a': 'b' } });
      await outbox.publishMany(
        [
          { destination: d, payload: 'text "quoted" \\ back', key: 'k2' },
          { destination: d, payload: Buffer.from([0, 1, 255]), headers: { 'x-b': 'c' } },
        ],
        { tx },
      );
      const id = await queue.enqueue('welcome', { name: 'to-cancel' }, { queue: `${q}-cancel`, tx });
      job = await queue.getJob(id, { tx });
      cancelled = await queue.cancel(id, { tx });
    });
    expect(job!.run_at).toBeInstanceOf(Date);
    expect(job!.created_at).toBeInstanceOf(Date);
    expect(cancelled).toMatchObject({ ok: true, previousStatus: 'pending', job: { status: 'cancelled' } });
    expect(cancelled!.ok && cancelled!.job.finished_at).toBeInstanceOf(Date);
    const { rows } = await db.pool.query(
      `SELECT key, headers, encode(payload, 'hex') AS hex FROM ${db.s}.outbox WHERE destination = $1 ORDER BY id`,
      [d],
    );
    expect(rows).toEqual([
      { key: 'k1', headers: { 'x-a': 'b' }, hex: Buffer.from('{"n":1}').toString('hex') },
      { key: 'k2', headers: null, hex: Buffer.from('text "quoted" \\ back').toString('hex') },
      { key: null, headers: { 'x-b': 'c' }, hex: '0001ff' },
    ]);
    await outbox.close();
  });

  it('admin actions that wake a queue run in the transaction: retryJob, runJobNow (outside review 214: Prisma could not read void)', async () => {
    const [retried, delayed] = await queue.enqueueMany([
      { task: 'welcome', queue: `${q}-admin`, payload: { name: 'retried' } },
      { task: 'welcome', queue: `${q}-admin`, payload: { name: 'delayed' }, delayMs: 3_600_000 },
    ]);
    await queue.cancel(retried!);
    await lib.transaction(async ({ tx }) => {
      expect(await retryJob(tx, db.schema, retried!)).toMatchObject({ ok: true });
      expect(await runJobNow(tx, db.schema, delayed!)).toMatchObject({ ok: true });
    });
    expect((await queue.getJob(retried!))?.status).toBe('pending');
    expect((await queue.getJob(delayed!))!.run_at.getTime()).toBeLessThanOrEqual(Date.now() + 1_000);
  });

  it('throw inside the transaction: neither the row nor the jobs exist, and no worker was woken', async () => {
    const name = `${libName}:rolled-back`;
    const listener = new pg.Client(db.url);
    await listener.connect();
    const received: string[] = [];
    listener.on('notification', (m) => received.push(m.payload ?? ''));
    await listener.query(`LISTEN "${channelFor(db.schema)}"`);
    try {
      await expect(
        lib.transaction(async ({ tx, insertUser }) => {
          await insertUser(name);
          await enqueueFor(tx, q, name);
          throw new Error('changed my mind');
        }),
      ).rejects.toThrow('changed my mind');
      expect(await usersNamed(name)).toEqual([]);
      expect((await jobsIn(q)).filter((j) => j.payload.name.startsWith(name))).toEqual([]);
      // Notifications arrive in commit order: once the marker is here, anything
      // the rolled-back transaction could have sent would be here too.
      await db.pool.query(`SELECT pg_notify($1, 'marker')`, [channelFor(db.schema)]);
      await waitFor(() => received.includes('marker'), 'the marker notification');
      expect(received).toEqual(['marker']);
    } finally {
      await listener.end();
    }
  });
});

describe('an adapter whose transaction ended, or that never had one (outside review 212)', () => {
  it('MikroORM: a fork made inside em.transactional(), or an em after its rollback, is refused; the context em is taken', async () => {
    const { orm } = await mikroOrm();
    try {
      await expect(
        orm.em.fork().transactional(async (em) => {
          await queue.enqueue('t', {}, { queue: 'ended', tx: mikroOrmAdapter(em.fork()) });
        }),
      ).rejects.toThrow(/^tx: mikroOrmAdapter: the EntityManager is in no transaction/);
      const em = orm.em.fork();
      await em.begin();
      const adapted = mikroOrmAdapter(em);
      await em.rollback();
      await expect(queue.enqueue('t', {}, { queue: 'ended', tx: adapted })).rejects.toThrow(/is in no transaction/);
      // Every write, not only enqueues (outside review 214: a cancel and a pause committed on their own).
      const id = await queue.enqueue('t', {}, { queue: 'ended-cancel', delayMs: 3_600_000 });
      await expect(queue.cancel(id, { tx: adapted })).rejects.toThrow(/is in no transaction/);
      await expect(queue.pauseQueue('ended-cancel', { tx: adapted })).rejects.toThrow(/is in no transaction/);
      expect((await queue.getJob(id))?.status).toBe('pending');
      expect((await queue.listQueues()).find((x) => x.name === 'ended-cancel')?.paused ?? false).toBe(false);
      // Inside the callback the global em resolves to the transaction's context, as MikroORM documents.
      await orm.em.fork().transactional(async () => {
        await queue.enqueue('t', {}, { queue: 'ended-ok', tx: mikroOrmAdapter(orm.em) });
      });
    } finally {
      await orm.close();
    }
    expect(await jobsIn('ended')).toEqual([]);
    expect(await jobsIn('ended-ok')).toHaveLength(1);
  });

  it('TypeORM: a manager kept past its dataSource.transaction() callback is refused, saying so (outside review 229: told to call startTransaction())', async () => {
    const ds = await typeormDataSource();
    try {
      let kept: Parameters<typeof typeormAdapter>[0] | undefined;
      await ds.transaction(async (manager) => {
        kept = manager;
      });
      await expect(queue.enqueue('t', {}, { queue: 'ended', tx: typeormAdapter(kept!) })).rejects.toThrow(
        /^tx: typeormAdapter: .*a manager kept past its dataSource\.transaction\(\) callback/,
      );
    } finally {
      await ds.destroy();
    }
    expect(await jobsIn('ended')).toEqual([]);
  });

  it('TypeORM: a QueryRunner adapted in its transaction and used after rollbackTransaction() is refused', async () => {
    const ds = await typeormDataSource();
    const runner = ds.createQueryRunner();
    try {
      await runner.connect();
      await runner.startTransaction();
      const adapted = [typeormAdapter(runner), typeormAdapter(runner.manager)];
      await runner.rollbackTransaction();
      const id = await queue.enqueue('t', {}, { queue: 'ended-cancel', delayMs: 3_600_000 });
      for (const tx of adapted) {
        await expect(queue.enqueue('t', {}, { queue: 'ended', tx })).rejects.toThrow(/^tx: typeormAdapter: .*no transaction/);
        await expect(queue.cancel(id, { tx })).rejects.toThrow(/^tx: typeormAdapter: .*no transaction/);
      }
      expect((await queue.getJob(id))?.status).toBe('pending');
    } finally {
      await runner.release();
      await ds.destroy();
    }
    expect(await jobsIn('ended')).toEqual([]);
  });

  it('every adapter refuses what cannot send its statements at once, a ConfigError naming it (outside reviews 245, 254)', () => {
    const adapters: [string, (bad: never) => unknown][] = [
      ['postgresJsAdapter', postgresJsAdapter],
      ['kyselyAdapter', kyselyAdapter],
      ['drizzleAdapter', drizzleAdapter],
      ['knexAdapter', knexAdapter],
      ['typeormAdapter', typeormAdapter],
      ['mikroOrmAdapter', mikroOrmAdapter],
      ['prismaAdapter', prismaAdapter],
    ];
    for (const [name, adapter] of adapters) {
      for (const [bad, got] of [
        [undefined, 'undefined'],
        [null, 'null'],
        [42, 'number'],
        [{}, 'an object without'],
      ] as const) {
        // Kysely and Drizzle threw a TypeError for undefined; 42 reached the enqueue as a DatabaseError.
        expect(() => adapter(bad as never), `${name}(${String(bad)})`).toThrow(ConfigError);
        expect(() => adapter(bad as never)).toThrow(new RegExp(`^${name}: give it .*, got ${got}`));
      }
    }
    expect(() => postgresJsAdapter(undefined as never)).toThrow(
      'postgresJsAdapter: give it the tx of sql.begin() (postgres.js), got undefined',
    );
  });

  it('postgres.js 4, alone and under Drizzle: a tx kept past its end is a ConfigError naming the adapter (outside review 229)', async (ctx) => {
    const sql = postgres(db.url, { max: 1, onnotice: () => {} });
    try {
      let kept: Parameters<typeof postgresJsAdapter>[0] | undefined;
      await sql.begin(async (tx) => {
        kept = tx;
      });
      let keptDrizzle: Parameters<typeof drizzleAdapter>[0] | undefined;
      await drizzlePostgresJs(sql).transaction(async (tx) => {
        keptDrizzle = tx;
      });
      // postgres.js 3 runs such a statement on its own (see the README): only 4 refuses it.
      const refusedByLibrary = await Promise.resolve(kept!.unsafe('SELECT 1')).then(
        () => false,
        (err: { code?: string }) => err.code === 'UNSAFE_TRANSACTION',
      );
      if (!refusedByLibrary) ctx.skip();
      for (const [tx, message] of [
        [postgresJsAdapter(kept!), /^tx: postgresJsAdapter: the transaction \(tx\) has ended .*sql\.begin\(\)/],
        [drizzleAdapter(keptDrizzle!), /^tx: drizzleAdapter: the transaction \(tx\) has ended .*db\.transaction\(\)/],
      ] as const) {
        const refused = await queue.enqueue('t', {}, { queue: 'ended', tx }).catch((err: unknown) => err);
        expect(refused).toBeInstanceOf(ConfigError);
        expect((refused as Error).message).toMatch(message);
      }
    } finally {
      await sql.end();
    }
    expect(await jobsIn('ended')).toEqual([]);
  });

  it('Kysely, Knex and Prisma: a trx kept past its commit or rollback is a ConfigError, as nothing was sent (outside review 212)', async () => {
    const kysely = new Kysely<any>({ dialect: new PostgresDialect({ pool: db.pool }) });
    const k = knex({ client: 'pg', connection: db.url, pool: { min: 0, max: 1 } });
    const prisma = new PrismaClient({ adapter: new PrismaPg({ connectionString: db.url, max: 1 }, { schema: db.schema }) });
    const outbox = new Outbox({ pool: db.pool, schema: db.schema });
    try {
      let committed: Parameters<typeof kyselyAdapter>[0] | undefined;
      await kysely.transaction().execute(async (trx) => {
        committed = trx;
      });
      let rolledBack: Parameters<typeof knexAdapter>[0] | undefined;
      await expect(
        k.transaction(async (trx) => {
          rolledBack = trx;
          throw new Error('changed my mind');
        }),
      ).rejects.toThrow('changed my mind');
      let prismaCommitted: Parameters<typeof prismaAdapter>[0] | undefined;
      await prisma.$transaction(async (tx) => {
        prismaCommitted = tx;
      });
      let prismaExpired: Parameters<typeof prismaAdapter>[0] | undefined;
      await prisma
        .$transaction(
          async (tx) => {
            prismaExpired = tx;
            await new Promise((resolve) => setTimeout(resolve, 300));
          },
          { timeout: 50 },
        )
        .catch(() => {});
      const id = await queue.enqueue('t', {}, { queue: 'ended-cancel', delayMs: 3_600_000 });
      const cases: [Queryable, RegExp][] = [
        [kyselyAdapter(committed!), /^tx: kyselyAdapter: the transaction \(trx\) is already committed/],
        [knexAdapter(rolledBack!), /^tx: knexAdapter: the transaction \(trx\) has ended/],
        [prismaAdapter(prismaCommitted!), /^tx: prismaAdapter: the transaction \(tx\) has ended: .*committed transaction/],
        [prismaAdapter(prismaExpired!), /^tx: prismaAdapter: the transaction \(tx\) has ended: .*expired transaction/],
      ];
      for (const [tx, message] of cases) {
        const refused = await queue.enqueue('t', {}, { queue: 'ended', tx }).catch((err: unknown) => err);
        expect(refused).toBeInstanceOf(ConfigError);
        expect((refused as Error).message).toMatch(message);
        await expect(queue.cancel(id, { tx })).rejects.toThrow(message);
        // A read and lockKeys alike (outside review 256: Knex's were DatabaseErrors, sent to the ended trx).
        await expect(queue.getJob(id, { tx })).rejects.toThrow(message);
        await expect(outbox.lockKeys('k', { tx })).rejects.toThrow(message);
      }
      expect((await queue.getJob(id))?.status).toBe('pending');
    } finally {
      await Promise.all([k.destroy(), prisma.$disconnect()]);
    }
    expect(await jobsIn('ended')).toEqual([]);
  });
});

describe("a library's global object as tx (outside review 187)", () => {
  // Through the adapters these ran the job's insert on a connection of their own:
  // the job committed though the caller's transaction rolled back.
  it('is refused for an enqueue, and still reads; TypeORM objects without the adapter are refused before anything is sent', async () => {
    const pgPool = new pg.Pool({ connectionString: db.url, max: 2 });
    const sql = postgres(db.url, { max: 1, onnotice: () => {} });
    const k = knex({ client: 'pg', connection: db.url, pool: { min: 0, max: 1 } });
    const kdb = new Kysely<any>({ dialect: new PostgresDialect({ pool: pgPool }) });
    const ds = await typeormDataSource();
    const prisma = new PrismaClient({ adapter: new PrismaPg({ connectionString: db.url, max: 1 }, { schema: db.schema }) });
    const outbox = new Outbox({ pool: db.pool, schema: db.schema });
    try {
      const globals: [string, Queryable][] = [
        ['postgresJsAdapter', postgresJsAdapter(sql)],
        ['knexAdapter', knexAdapter(k)],
        ['kyselyAdapter', kyselyAdapter(kdb)],
        ['drizzleAdapter', drizzleAdapter(drizzlePg(pgPool))],
        ['typeormAdapter', typeormAdapter(ds)],
        ['typeormAdapter', typeormAdapter(ds.manager)],
        // Outside review 190: a Repository of the global manager, and a QueryRunner's manager before BEGIN.
        ['typeormAdapter', typeormAdapter(ds.getRepository('User'))],
        ['typeormAdapter', typeormAdapter(ds.createQueryRunner().manager)],
        ['prismaAdapter', prismaAdapter(prisma)],
      ];
      for (const [name, tx] of globals) {
        await expect(queue.enqueue('t', {}, { queue: 'globals', tx }), name).rejects.toThrow(
          new RegExp(`^tx: ${name}(:| was given)`),
        );
        // Its locks would end with the statement: refused as every write is (outside review 256).
        await expect(outbox.lockKeys('k', { tx }), name).rejects.toThrow(new RegExp(`^tx: ${name}(:| was given)`));
        // Reads (the admin API, a SELECT) through them are fine.
        expect((await tx.query('SELECT 1 AS one')).rows, name).toEqual([{ one: 1 }]);
      }
      expect(() => knexAdapter(k('users') as never)).toThrow(/not a query builder/);
      for (const raw of [ds, ds.manager, ds.getRepository('User')]) {
        await expect(queue.enqueue('t', {}, { queue: 'globals', tx: raw as never })).rejects.toThrow(
          /wrap the transaction's manager in typeormAdapter/,
        );
      }
      expect(await jobsIn('globals')).toEqual([]);
    } finally {
      await Promise.all([sql.end(), k.destroy(), kdb.destroy(), ds.destroy(), prisma.$disconnect()]);
    }
  });
});

describe('a connection lost inside a Knex transaction', () => {
  it("is a ConnectionError in Postgres's or the driver's words, without the statement and its payload (outside review 270)", async () => {
    const gate = await startGate(new URL(db.url));
    const k = knex({ client: 'pg', connection: gate.url, pool: { min: 0, max: 1 } });
    let failure: unknown;
    try {
      await k
        .transaction(async (trx) => {
          await trx.raw('SELECT 1');
          gate.down();
          failure = await queue
            .enqueue('welcome', { name: 'payload-270' }, { queue: 'lib-cut', tx: knexAdapter(trx) })
            .catch((e: unknown) => e);
        })
        .catch(() => {});
    } finally {
      await k.destroy();
      await gate.close();
    }
    expect(failure).toBeInstanceOf(ConnectionError);
    const message = (failure as Error).message;
    expect(message).not.toMatch(/payload-270|insert|select/i);
    expect(message).toMatch(/Connection terminated|not queryable/);
  });
});

describe('drizzle errors', () => {
  it("pass the driver's error on, so a held key is a DuplicateJobError (outside review 187: a DatabaseError holding the SQL)", async () => {
    const pgPool = new pg.Pool({ connectionString: db.url, max: 1 });
    try {
      await queue.enqueue('t', {}, { queue: 'drizzle-key', jobKey: 'drizzle-held' });
      const err = await drizzlePg(pgPool)
        .transaction((tx) =>
          queue.enqueue('t', {}, { queue: 'drizzle-key', jobKey: 'drizzle-held', jobKeyMode: 'error', tx: drizzleAdapter(tx) }),
        )
        .catch((e: unknown) => e as Error);
      expect(err).toBeInstanceOf(DuplicateJobError);
      expect((err as Error).message).not.toMatch(/INSERT|SELECT/);
    } finally {
      await pgPool.end();
    }
  });
});
