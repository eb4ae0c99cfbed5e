/** What Worker.start() says when it cannot work: once, clearly, with what to do. */
import { describe, expect, it } from 'vitest';
import pg from 'pg';
import { ConfigError, MigrationError, Queue, Worker, type SluiceError } from '../src/index.js';
import { loadMigrations } from '../src/migrate.js';
import { createTestSchema, databaseUrl, waitFor } from './helpers/database.js';
import { TEST_DRIVER } from './helpers/driver.js';
import { WORKER_KEYS } from '../src/worker/options.js';

describe('Worker.start()', () => {
  it('rejects with the migrate hint when the schema was never migrated', async () => {
    const worker = new Worker({
      connectionString: databaseUrl(),
      schema: 'never_migrated_here',
      driver: TEST_DRIVER,
      tasks: { t: async () => {} },
    });
    const started = worker.start();
    await expect(started).rejects.toBeInstanceOf(MigrationError);
    await expect(started).rejects.toThrow(/no Sluice tables in schema "never_migrated_here": run `sluice migrate`/);
    await worker.stop();
  });

  it('rejects with a MigrationError when the schema lacks a migration this version has; a schema ahead starts (outside review 171)', async () => {
    const db = await createTestSchema('behind');
    try {
      const newest = (await loadMigrations()).at(-1)!.version;
      await db.pool.query(`DELETE FROM ${db.s}.migrations WHERE version = $1`, [newest]);
      const options = { connectionString: db.url, schema: db.schema, driver: TEST_DRIVER, tasks: { t: async () => {} } };
      const behind = new Worker(options);
      const started = behind.start();
      await expect(started).rejects.toBeInstanceOf(MigrationError);
      await expect(started).rejects.toThrow(
        `schema "${db.schema}" is at migration ${newest - 1}, and this version of Sluice needs ${newest}: run \`sluice migrate\``,
      );
      await behind.stop();
      // A rolling upgrade: the schema migrated past this version's newest, old workers still running.
      await db.pool.query(`INSERT INTO ${db.s}.migrations (version, name) VALUES ($1, 'restored'), ($2, 'future')`, [
        newest,
        newest + 1,
      ]);
      const ahead = new Worker(options);
      await ahead.start();
      await ahead.stop();
    } finally {
      await db.drop();
    }
  });

  it.each([
    ['a role that does not exist', (u: URL) => (u.username = 'sluice_no_such_role')],
    ['a database that does not exist', (u: URL) => (u.pathname = '/sluice_no_such_db')],
  ])('rejects with a ConfigError for %s, with no error event (outside review 150)', async (_, change) => {
    const url = new URL(databaseUrl());
    change(url);
    const errors: Error[] = [];
    const worker = new Worker({ connectionString: url.toString(), driver: TEST_DRIVER, tasks: { t: async () => {} } });
    worker.on('error', (e) => errors.push(e));
    const started = worker.start();
    await expect(started).rejects.toBeInstanceOf(ConfigError);
    // Trust auth (the CI server) says the role does not exist; password auth (the
    // embedded server) that the login failed.
    await expect(started).rejects.toThrow(
      /^Postgres at .*: (role "sluice_no_such_role" does not exist|password authentication failed for user "sluice_no_such_role"|database "sluice_no_such_db" does not exist) \(/,
    );
    await worker.stop();
    expect(errors).toEqual([]);
  });

  it('rejects with a ConfigError for a role without CONNECT on the database (outside review 153)', async () => {
    const tag = `${process.pid}_${Date.now()}`;
    const [database, role] = [`sluice_noconnect_${tag}`, `sluice_noconnect_${tag}`];
    const admin = new pg.Client({ connectionString: databaseUrl() });
    await admin.connect();
    try {
      await admin.query(`CREATE DATABASE ${database}`);
      await admin.query(`REVOKE CONNECT ON DATABASE ${database} FROM PUBLIC`);
      await admin.query(`CREATE ROLE ${role} LOGIN PASSWORD 'pw'`);
      const url = new URL(databaseUrl());
      [url.username, url.password, url.pathname] = [role, 'pw', `/${database}`];
      const worker = new Worker({ connectionString: url.toString(), driver: TEST_DRIVER, tasks: { t: async () => {} } });
      const started = worker.start();
      await expect(started).rejects.toBeInstanceOf(ConfigError);
      await expect(started).rejects.toThrow(/permission denied for database .*\(grant the role CONNECT on the database\)$/);
      await worker.stop();
    } finally {
      await admin.query(`DROP DATABASE IF EXISTS ${database}`);
      await admin.query(`DROP ROLE IF EXISTS ${role}`);
      await admin.end();
    }
  });

  it('rejects with a ConfigError when the login of its listenConnectionString is refused (outside review 153)', async () => {
    const { createTestSchema } = await import('./helpers/database.js');
    const db = await createTestSchema('listenurl');
    try {
      const listen = new URL(db.url);
      listen.username = 'sluice_no_such_role';
      const worker = new Worker({
        connectionString: db.url,
        listenConnectionString: listen.toString(),
        schema: db.schema,
        driver: TEST_DRIVER,
        tasks: { t: async () => {} },
      });
      const errors: Error[] = [];
      worker.on('error', (e) => errors.push(e));
      const started = worker.start();
      await expect(started).rejects.toBeInstanceOf(ConfigError);
      await expect(started).rejects.toThrow(/^listenConnectionString: Postgres at .*sluice_no_such_role/);
      await worker.stop();
      // Told once, by the rejection (outside review 154: an error event came first).
      expect(errors.map((e) => e.message)).toEqual([]);
    } finally {
      await db.drop();
    }
  });

  it('starts while Postgres is out of reach and reports where it tried, without the password', async () => {
    const errors: SluiceError[] = [];
    const worker = new Worker({
      connectionString: 'postgres://someone:s3cret@127.0.0.1:1/nowhere',
      driver: TEST_DRIVER,
      tasks: { t: async () => {} },
    });
    worker.on('error', (e) => errors.push(e));
    try {
      await worker.start();
      await waitFor(() => errors.find((e) => e.code === 'CONNECTION'), 'a connection error event');
      const first = errors.find((e) => e.code === 'CONNECTION')!;
      expect(first.message).toMatch(/cannot reach Postgres at 127\.0\.0\.1:1\/nowhere/);
      expect(errors.map((e) => e.message).join('\n')).not.toContain('s3cret');
    } finally {
      await worker.stop();
    }
  });
});

describe('start() after stop()', () => {
  it('says the worker was stopped before it started, or that it can be started once (outside review 162)', async () => {
    const make = () =>
      new Worker({ connectionString: databaseUrl(), schema: 'never_migrated_here', driver: TEST_DRIVER, tasks: { t: () => {} } });
    const early = make();
    await early.stop();
    await expect(early.start()).rejects.toThrow('this Worker was stopped before it started: make a new Worker');
    const refused = make();
    await expect(refused.start()).rejects.toBeInstanceOf(MigrationError);
    await expect(refused.start()).rejects.toThrow('a Worker can be started once: make a new Worker');
  });
});

describe('Worker.start() failing after it connected', () => {
  it('closes its connections: a metrics port already taken rejects start() and leaves no connection open', async () => {
    const net = await import('node:net');
    const { createTestSchema } = await import('./helpers/database.js');
    const db = await createTestSchema('startfail');
    // The worker reaches Postgres through this counter of open connections.
    const upstream = new URL(db.url);
    let open = 0;
    let opened = 0;
    const proxy = net.createServer((client) => {
      const server = net.connect(Number(upstream.port || 5432), upstream.hostname || '127.0.0.1');
      open++;
      opened++;
      let closed = false;
      const close = () => {
        if (!closed) open--;
        closed = true;
        client.destroy();
        server.destroy();
      };
      client.pipe(server).pipe(client);
      client.on('error', close).on('close', close);
      server.on('error', close).on('close', close);
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    const through = new URL(db.url);
    through.hostname = '127.0.0.1';
    through.port = String((proxy.address() as { port: number }).port);
    const taken = net.createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    try {
      const worker = new Worker({
        connectionString: through.toString(),
        schema: db.schema,
        driver: TEST_DRIVER,
        tasks: { t: async () => {} },
        metrics: { port: (taken.address() as { port: number }).port, host: '127.0.0.1' },
      });
      worker.on('error', () => {});
      await expect(worker.start()).rejects.toThrow();
      await worker.stop();
      expect(opened).toBeGreaterThan(0); // it had connected (the schema probe) before it failed
      await waitFor(() => open === 0, 'the worker to close every connection', 10_000);
    } finally {
      taken.close();
      proxy.close();
      await db.drop();
    }
  });

  it('refuses a pool of max 1 that its LISTEN would keep for good, and a URL pg would misread', async () => {
    const pool = new pg.Pool({ connectionString: databaseUrl(), max: 1 });
    const tasks = { t: async () => {} };
    try {
      expect(() => new Worker({ pool, tasks })).toThrow(ConfigError);
      expect(() => new Worker({ pool, tasks })).toThrow(/your pool's max is 1, and LISTEN keeps one of its connections for good/);
      // Without LISTEN on the pool, a pool of one is enough.
      expect(() => new Worker({ pool, tasks, listen: false })).not.toThrow();
      expect(() => new Worker({ pool, tasks, listenConnectionString: databaseUrl() })).not.toThrow();
    } finally {
      await pool.end();
    }
    // In the constructor, as the Queue's (outside review 116: only start() refused it).
    for (const url of ['not a url', 'postgres:/db', 'mysql://x@y/z', 'http://h/d']) {
      expect(() => new Worker({ connectionString: url, tasks })).toThrow(ConfigError);
      expect(() => new Worker({ connectionString: url, tasks })).toThrow(/^connectionString: the database URL (is not|must)/);
      expect(() => new Worker({ connectionString: databaseUrl(), listenConnectionString: url, tasks })).toThrow(
        /^listenConnectionString: /,
      );
    }
  });
});

describe('stop() while start() is still running', () => {
  it('lets start() settle, claims nothing it then abandons, and leaves no job processing', async () => {
    const { createTestSchema } = await import('./helpers/database.js');
    const { Queue } = await import('../src/index.js');
    const db = await createTestSchema('earlystop');
    const queue = new Queue({ pool: db.pool, schema: db.schema });
    try {
      await queue.enqueueMany(Array.from({ length: 50 }, () => ({ task: 'slow' })));
      for (const delayMs of [0, 5, 20, 60]) {
        const worker = new Worker({
          connectionString: db.url,
          schema: db.schema,
          driver: TEST_DRIVER,
          tasks: { slow: () => new Promise((r) => setTimeout(r, 50)) },
        });
        worker.on('error', () => {});
        const started = worker.start();
        await new Promise((r) => setTimeout(r, delayMs));
        await Promise.all([started, worker.stop()]);
        const { rows } = await db.pool.query(`SELECT count(*)::int AS n FROM ${db.s}.jobs WHERE status = 'processing'`);
        expect(rows[0].n, `stop() ${delayMs} ms after start()`).toBe(0);
      }
    } finally {
      await queue.close();
      await db.drop();
    }
  });
});

describe('options given as undefined', () => {
  it('are taken as left out, by the Worker, the Queue and enqueue (outside review 273: the types now say so too)', async () => {
    const db = await createTestSchema('undef_opts');
    // Every option the Worker takes, each given as undefined (but where to connect and the tasks).
    const keys = [...WORKER_KEYS].filter((k) => !['connectionString', 'schema', 'tasks'].includes(k));
    const left = Object.fromEntries(keys.map((k) => [k, undefined]));
    const ran: unknown[] = [];
    const worker = new Worker({
      ...left,
      connectionString: db.url,
      schema: db.schema,
      tasks: { t: async (p) => void ran.push(p) },
    });
    const queue = new Queue({
      connectionString: db.url,
      schema: db.schema,
      driver: undefined,
      sql: undefined,
      schemas: undefined,
      maxPayloadBytes: undefined,
      metrics: undefined,
      preparedStatements: undefined,
      statementTimeoutMs: undefined,
    });
    try {
      await worker.start();
      const jobLeft = {
        queue: undefined,
        runAt: undefined,
        delayMs: undefined,
        maxAttempts: undefined,
        priority: undefined,
        group: undefined,
        jobKey: undefined,
        jobKeyMode: undefined,
        jobKeyWhileProcessing: undefined,
        waitable: undefined,
      };
      const id = await queue.enqueue('t', { n: 1 }, jobLeft);
      await queue.enqueueMany([{ task: 't', payload: { n: 2 }, ...jobLeft }]);
      const job = await queue.waitFor(id, { timeoutMs: undefined, pollIntervalMs: undefined });
      expect(job).toMatchObject({ status: 'completed', queue: 'default', max_attempts: 5, priority: 0 });
      await waitFor(() => ran.length === 2, 'both jobs to run');
      expect(ran).toEqual(expect.arrayContaining([{ n: 1 }, { n: 2 }]));
    } finally {
      await worker.stop();
      await queue.close();
      await db.drop();
    }
  });
});
