/**
 * Every Queue method rejects with a ConnectionError (a SluiceError with a code
 * callers can branch on) when Postgres stops answering or cannot be reached, not
 * with the driver's own error (outside review 87: getJob threw pg's bare Error).
 */
import { createServer, type AddressInfo, type Socket } from 'node:net';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, ConnectionError, NotSentError, Queue } from '../src/index.js';
import { createTestSchema, waitFor, type TestDatabase } from './helpers/database.js';
import { startTcpProxy, type TcpProxy } from './helpers/tcp-proxy.js';

let db: TestDatabase;
let id: string;
const proxies: TcpProxy[] = [];

beforeAll(async () => {
  db = await createTestSchema('qnet');
  const queue = new Queue({ pool: db.pool, schema: db.schema });
  id = await queue.enqueue('quiet', { n: 1 });
});
afterAll(async () => {
  for (const p of proxies) {
    p.restore();
    await p.close();
  }
  await db.drop();
});

async function proxied(): Promise<TcpProxy> {
  const proxy = await startTcpProxy(db.url);
  proxies.push(proxy);
  return proxy;
}

/** Each public read or setting of a Queue, called once. */
const calls: [string, (q: Queue) => Promise<unknown>][] = [
  ['getJob', (q) => q.getJob(id)],
  ['waitFor', (q) => q.waitFor(id, { timeoutMs: 60_000 })],
  ['cancel', (q) => q.cancel('999999999')],
  ['pauseQueue', (q) => q.pauseQueue('elsewhere')],
  ['resumeQueue', (q) => q.resumeQueue('elsewhere')],
  ['setQueueConcurrency', (q) => q.setQueueConcurrency('elsewhere', 3)],
  ['listQueues', (q) => q.listQueues()],
  ['enqueue', (q) => q.enqueue('quiet', { n: 2 })],
  ['enqueueMany', (q) => q.enqueueMany([{ task: 'quiet', payload: { n: 3 } }])],
];

describe.each(['pg', 'postgres.js'] as const)('a Queue on %s', (driver) => {
  it.each(calls)('%s on a silent network rejects with a ConnectionError', async (_name, call) => {
    const proxy = await proxied();
    const queue = new Queue({ connectionString: proxy.url, schema: db.schema, driver, statementTimeoutMs: 800 });
    try {
      await queue.listQueues(); // a connection is open and idle before the cut
      proxy.cut();
      const error: unknown = await call(queue).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(ConnectionError);
      expect((error as ConnectionError).message).toMatch(/no answer from Postgres within 800 ms \(a silent network, or/);
    } finally {
      proxy.restore();
      await queue.close();
    }
  });

  it.each(calls)('%s with Postgres unreachable rejects with a ConnectionError', async (_name, call) => {
    const proxy = await proxied();
    await proxy.close(); // nothing listens on its port now: connection refused
    const queue = new Queue({ connectionString: proxy.url, schema: db.schema, driver, statementTimeoutMs: 800 });
    try {
      const error: unknown = await call(queue).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(ConnectionError);
      expect((error as ConnectionError).message).toMatch(/ECONNREFUSED|connect/i);
      // Refused: nothing was sent, and an enqueue says the job does not exist (outside review 101).
      if (_name.startsWith('enqueue')) {
        expect(error).toBeInstanceOf(NotSentError);
        const jobs = _name === 'enqueueMany' ? 'the jobs were' : 'the job was';
        expect((error as Error).message).toMatch(new RegExp(`nothing was sent, so ${jobs} not enqueued$`));
        expect((error as Error).message).not.toMatch(/exists all the same/);
      }
    } finally {
      await queue.close();
    }
  });
});

describe('enqueueAfterCommit', () => {
  it('says that work() committed when its jobs cannot be enqueued after it (outside review 124)', async () => {
    const proxy = await proxied();
    await proxy.close(); // refused: nothing is sent
    const queue = new Queue({ connectionString: proxy.url, schema: db.schema, statementTimeoutMs: 800 });
    try {
      const error: unknown = await queue
        .enqueueAfterCommit(async (jobs) => {
          await jobs.enqueue('after', { n: 1 });
          await jobs.enqueue('after', { n: 2 });
          return 'committed';
        })
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      expect(error).toBeInstanceOf(NotSentError);
      expect((error as Error).message).toMatch(
        /^enqueueAfterCommit: work\(\) resolved \(taken to mean your transaction committed\), then enqueueing its 2 job\(s\) failed: .*the jobs were not enqueued$/,
      );
    } finally {
      await queue.close();
    }
  });
});

describe('a pool of yours with no free client', () => {
  it('fails the statement with a NotSentError after statementTimeoutMs, sends nothing, and leaves the pool usable', async () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 1 });
    pool.on('error', () => {});
    const queue = new Queue({ pool, schema: db.schema, statementTimeoutMs: 300 });
    const held = await pool.connect();
    try {
      const error: unknown = await queue.enqueue('starved', { n: 1 }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(NotSentError);
      expect((error as Error).message).toMatch(
        /no connection from your pool within 300 ms \(max 1, 1 open, 0 idle, 1 waiting\): its clients were all in use/,
      );
      expect((error as Error).message).toMatch(/the job was not enqueued$/);
    } finally {
      held.release();
    }
    // The checkout that was given up on got its client later and handed it straight back.
    await queue.enqueue('starved', { n: 2 });
    const { rows } = await db.pool.query(`SELECT payload->>'n' AS n FROM ${db.s}.jobs WHERE task = 'starved'`);
    expect(rows.map((r: { n: string }) => r.n)).toEqual(['2']);
    expect(pool.totalCount - pool.idleCount).toBe(0);
    await queue.close();
    await pool.end();
  });
});

describe('a pool of yours of one connection', () => {
  it('refuses waitFor, whose LISTEN would keep that connection for good', async () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 1 });
    const queue = new Queue({ pool, schema: db.schema });
    try {
      const id = await queue.enqueue('one_client', {});
      await expect(queue.waitFor(id)).rejects.toThrow(/^waitFor: your pool's max is 1, and waitFor's LISTEN would keep/);
      expect(await queue.getJob(id)).toMatchObject({ status: 'pending' });
    } finally {
      await queue.close();
      await pool.end();
    }
  });
});

describe('a login the server turns away for now', () => {
  it('too many connections (53300) is a NotSentError: the job was not enqueued', async () => {
    const role = `sluice_full_${process.pid}`;
    await db.pool.query(`DROP ROLE IF EXISTS ${role}`);
    // A password: the embedded server asks for one (the machine's trusts local logins).
    await db.pool.query(`CREATE ROLE ${role} LOGIN PASSWORD 'full' CONNECTION LIMIT 0`);
    const url = new URL(db.url);
    url.username = role;
    url.password = 'full';
    const queue = new Queue({ connectionString: url.toString(), schema: db.schema });
    try {
      const error: unknown = await queue.enqueue('full', {}).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(NotSentError);
      expect((error as Error).message).toMatch(
        /too many connections for role .*; nothing was sent, so the job was not enqueued$/,
      );
    } finally {
      await queue.close();
      await db.pool.query(`DROP ROLE ${role}`);
    }
  });
});

describe("enqueues that find every connection of the Queue's own pool busy", () => {
  it('are NotSentErrors that say so, not "timeout exceeded when trying to connect" (outside review 241), and none exists', async () => {
    const queue = new Queue({ connectionString: db.url, schema: db.schema, statementTimeoutMs: 1_000 });
    const blocker = await db.pool.connect();
    try {
      await queue.enqueue('warm', {}); // its pool open
      await blocker.query('BEGIN');
      await blocker.query(`LOCK TABLE ${db.s}.jobs IN ACCESS EXCLUSIVE MODE`);
      // 10 connections, all behind the lock: the rest wait for one of them.
      const settled = await Promise.allSettled(Array.from({ length: 16 }, () => queue.enqueue('busy_pool', {})));
      await blocker.query('ROLLBACK');
      const errors = settled.map((r) => (r.status === 'rejected' ? (r.reason as Error) : undefined));
      const notSent = errors.filter((e) => e instanceof NotSentError);
      expect(notSent.length).toBeGreaterThan(0);
      for (const e of notSent)
        expect(e!.message).toMatch(
          /^enqueue failed: no free connection of its own pool within 1000 ms \(max 10, 10 open, 0 idle, \d+ waiting\)/,
        );
      expect(errors.some((e) => /timeout exceeded when trying to connect/.test(String(e?.message)))).toBe(false);
      const { rows } = await db.pool.query(`SELECT count(*)::int AS n FROM ${db.s}.jobs WHERE task = 'busy_pool'`);
      expect(rows[0].n).toBeLessThanOrEqual(16 - notSent.length);
    } finally {
      blocker.release();
      await queue.close();
    }
  });
});

describe("an enqueue in the caller's transaction that gets no reply in time", () => {
  it("is a ConnectionError when the caller's pool gives up on it (pg's query_timeout; outside review 118)", async () => {
    const pool = new pg.Pool({ connectionString: db.url, query_timeout: 300 });
    const blocker = await db.pool.connect();
    const tx = await pool.connect();
    const queue = new Queue({ schema: db.schema });
    try {
      // The insert waits for this lock: no reply, as on a network gone silent.
      await blocker.query('BEGIN');
      await blocker.query(`LOCK TABLE ${db.s}.jobs IN ACCESS EXCLUSIVE MODE`);
      await tx.query('BEGIN');
      const error: unknown = await queue.enqueue('no_reply', {}, { tx }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(ConnectionError);
      expect((error as Error).message).toMatch(/Query read timeout/);
      // The insert was cancelled, not left waiting: once the lock goes, a COMMIT on this
      // client (a request that got it back from the pool) commits no job (outside review 241).
      await blocker.query('ROLLBACK');
      await tx.query('COMMIT');
      const { rows } = await db.pool.query(`SELECT count(*)::int AS n FROM ${db.s}.jobs WHERE task = 'no_reply'`);
      expect(rows[0].n).toBe(0);
    } finally {
      await blocker.query('ROLLBACK');
      blocker.release();
      // pg leaves a client that timed out in use; it is not given back to the pool.
      tx.release(true);
      await pool.end();
      await queue.close();
    }
  });
});

describe("an enqueue in a caller's transaction whose connection is already gone", () => {
  it('is a NotSentError: pg refuses the statement before sending it (outside review 150)', async () => {
    const tx = new pg.Client({ connectionString: db.url });
    tx.on('error', () => {});
    await tx.connect();
    const queue = new Queue({ schema: db.schema });
    try {
      await tx.query('BEGIN');
      const pid = (await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
      const ended = new Promise((resolve) => tx.once('end', resolve));
      await db.pool.query('SELECT pg_terminate_backend($1)', [pid]);
      await ended; // pg has seen its connection end: it sends nothing more on it
      const error = await queue.enqueue('gone', {}, { tx }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(NotSentError);
      expect((error as Error).message).toMatch(/not queryable.*nothing was sent/);
      await tx.end().catch(() => {});
      expect(await queue.enqueue('gone', {}, { tx }).catch((e: unknown) => e)).toBeInstanceOf(NotSentError);
      const { rows } = await db.pool.query(`SELECT count(*)::int AS n FROM ${db.s}.jobs WHERE task = 'gone'`);
      expect(rows[0].n).toBe(0);
    } finally {
      await tx.end().catch(() => {});
      await queue.close();
    }
  });
});

describe('a connection string that is not a URL', () => {
  it('takes the socket forms pg takes', () => {
    for (const url of ['postgresql://postgres@/db?host=/tmp&port=5', 'postgresql:///db?host=/tmp', 'socket:/tmp?db=x']) {
      expect(() => new Queue({ connectionString: url })).not.toThrow();
    }
  });

  it.each(['not a url', 'mysql://root@localhost/db', 'postgres://user:pass@host:port/db', 'postgres:/db'])(
    '%s is a ConfigError naming the option, before any connection',
    (url) => {
      expect(() => new Queue({ connectionString: url })).toThrow(ConfigError);
      expect(() => new Queue({ connectionString: url })).toThrow(/^connectionString: the database URL (is not|must)/);
      expect(() => new Queue({ connectionString: db.url, listenConnectionString: url })).toThrow(/^listenConnectionString: /);
    },
  );
});

describe.each(['pg', 'postgres.js'] as const)('an enqueue whose reply is lost, on %s', (driver) => {
  // postgres.js describes a new statement before it executes it: the proxy's cut
  // after the message with its text lands before the execution, so nothing commits.
  it.runIf(driver === 'pg')('says the job may exist, and it does: the commit went through', async () => {
    const proxy = await proxied();
    const queue = new Queue({ connectionString: proxy.url, schema: db.schema, driver, statementTimeoutMs: 5_000 });
    try {
      const lost = proxy.loseReplyTo('RETURNING id::text AS id');
      const error: unknown = await queue.enqueue('reply_lost', { driver }).then(
        () => undefined,
        (e: unknown) => e,
      );
      await lost;
      expect(error).toBeInstanceOf(ConnectionError);
      expect((error as Error).message).toMatch(/^enqueue failed: .*; the job exists all the same if Postgres ran the statement/);
      // Postgres reads the statement, runs and commits it, with no one to tell.
      await waitFor(async () => {
        const { rows } = await db.pool.query(`SELECT count(*)::int AS n FROM ${db.s}.jobs WHERE payload->>'driver' = $1`, [
          driver,
        ]);
        return rows[0].n === 1;
      }, 'the enqueued job');
    } finally {
      await queue.close();
    }
  });

  it.runIf(driver === 'pg')('says of a batch that all of its jobs may exist, and they all do (outside review 142)', async () => {
    const proxy = await proxied();
    const queue = new Queue({ connectionString: proxy.url, schema: db.schema, driver, statementTimeoutMs: 5_000 });
    try {
      const lost = proxy.loseReplyTo('RETURNING id::text AS id');
      const tag = `${driver}-batch`;
      const error: unknown = await queue.enqueueMany([1, 2, 3].map((n) => ({ task: 'reply_lost', payload: { tag, n } }))).then(
        () => undefined,
        (e: unknown) => e,
      );
      await lost;
      expect(error).toBeInstanceOf(ConnectionError);
      expect((error as Error).message).toMatch(
        /^enqueueMany failed: .*; the jobs exist all the same, every one of the batch, if Postgres ran the statement/,
      );
      await waitFor(async () => {
        const { rows } = await db.pool.query(`SELECT count(*)::int AS n FROM ${db.s}.jobs WHERE payload->>'tag' = $1`, [tag]);
        return rows[0].n === 3;
      }, 'the enqueued jobs');
    } finally {
      await queue.close();
    }
  });

  it("does not say so inside the caller's transaction, whose commit is the caller's", async () => {
    const proxy = await proxied();
    const queue = new Queue({ schema: db.schema, driver });
    const client = new pg.Client({ connectionString: proxy.url });
    client.on('error', () => {});
    await client.connect();
    try {
      await client.query('BEGIN');
      const lost = proxy.loseReplyTo('RETURNING id::text AS id');
      const error: unknown = await queue.enqueue('in_tx', {}, { tx: client }).then(
        () => undefined,
        (e: unknown) => e,
      );
      await lost;
      expect(error).toBeInstanceOf(ConnectionError);
      expect((error as Error).message).not.toMatch(/the job exists all the same/);
    } finally {
      await client.end().catch(() => {});
      await queue.close();
    }
  });
});

describe('a server that drops the connection during its startup', () => {
  // Accepted, then reset or closed before Postgres's startup reply: no statement can
  // have gone out. Told "the job exists all the same" (outside review 222).
  // postgres.js: only the reset is told apart (an error of the TCP connect itself).
  const reset = (s: Socket) => s.resetAndDestroy();
  const closed = (s: Socket) => s.end();
  it.each([
    ['reset', 'pg', reset],
    ['closed', 'pg', closed],
    ['reset', 'postgres.js', reset],
  ] as const)('%s, on %s: an enqueue is a NotSentError, with or without a statement limit', async (_how, driver, drop) => {
    const sockets = new Set<Socket>();
    const server = createServer((socket) => {
      sockets.add(socket);
      drop(socket);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `postgres://postgres@127.0.0.1:${(server.address() as AddressInfo).port}/postgres`;
    try {
      for (const limit of [{}, { statementTimeoutMs: 3_000 }]) {
        const queue = new Queue({ connectionString: url, schema: db.schema, driver, ...limit });
        try {
          for (const call of [() => queue.enqueue('quiet', {}), () => queue.enqueueMany([{ task: 'quiet' }])]) {
            const error = await call().then(
              () => undefined,
              (e: unknown) => e,
            );
            expect(error, JSON.stringify(limit)).toBeInstanceOf(NotSentError);
            expect((error as Error).message).toMatch(/nothing was sent, so the jobs? (was|were) not enqueued$/);
          }
        } finally {
          await queue.close();
        }
      }
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    }
  });
});
