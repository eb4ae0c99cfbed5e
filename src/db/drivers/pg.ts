import pg from 'pg';
import { destroyConnection, openPool, type PgClient, type PgPool, type PgPoolClient, type PgQueryConfig } from '../connection.js';
import { quoteIdent } from '../identifiers.js';
import { LISTEN_APPLICATION_NAME, STATEMENT_HINT, type Driver, type ListenHandlers, type Listening } from '../driver.js';
import type { Queryable } from '../executor.js';
import { ConnectionError, NotSentError } from '../../errors.js';
import { markNeverConnected } from '../../never-sent.js';
import { encodeArrays, SLUICE_TYPES } from './pg-encoding.js';
import { shorterLimit, timeLimit } from '../../lifecycle/time-limit.js';
import { cancelThenDrop } from './cancel.js';
import { withUnnamedFallback } from './unnamed-fallback.js';
import { poolExhausted, poolFull } from './pool-exhausted.js';
import { checkClientConnection } from '../statements/session.js';

/** Longest wait for Postgres to take the cancel of a statement that went past its limit. */
const CANCEL_LIMIT_MS = 2_000;

/**
 * Longest wait in end() for abort()'s cancels: on a healthy network one takes a
 * millisecond; on a silent one it never arrives, and stop() must not wait long.
 */
const ABORT_CANCEL_LIMIT_MS = 1_000;

/** Longest wait for UNLISTEN on close when no statement limit is set. */
const CLOSE_LIMIT_MS = 5_000;

/**
 * Whether a connection whose statement failed with `err` can serve the next one:
 * Postgres answered with an error of that statement (a SQLSTATE outside the
 * connection classes), and the session is ready again. pg's own pool.query drops
 * the connection whatever failed, so a result a trigger refused, tried again
 * every 250 ms, opened a new connection each time (outside review 42: about four
 * sessions a second per refused result, and the drain around them stalled).
 */
function reusableAfter(err: unknown): boolean {
  if (!(err instanceof pg.DatabaseError)) return false;
  const code = err.code ?? '';
  // 08: connection exceptions; 57P: the server shutting down or restarting.
  return code.length === 5 && !code.startsWith('08') && !code.startsWith('57P');
}

/** Swallows a checked-out client's 'error' event: the statement in flight fails with the error anyway. */
const ignoreError = (): void => {};

/**
 * pool.connect(), with an 'error' listener on the client from the moment the pool
 * hands it over. Awaiting the promise form leaves a gap: a new connection's
 * termination (pg_terminate_backend, a restart) can arrive in the same packet as
 * its ReadyForQuery and be parsed before the await resumes, and an 'error' event
 * nobody listens to ends the process (review 49, a worker on a pool of the
 * user's). The callback runs in that same turn. Whoever hands a healthy client
 * back removes ignoreError first.
 */
function checkout(pool: PgPool): Promise<PgPoolClient> {
  return new Promise((resolve, reject) => {
    pool.connect((err, client) => {
      if (err || !client) {
        reject(err ?? new Error('the pool gave no client'));
        return;
      }
      client.on('error', ignoreError);
      resolve(client);
    });
  });
}

export interface PgDriverOptions {
  connectionString?: string;
  pool?: PgPool;
  /** LISTEN through this URL instead (e.g. when the pool goes through a transaction-mode pooler). */
  listenConnectionString?: string;
  /** Pool size when the driver makes the pool. */
  max: number;
  applicationName: string;
  /**
   * Most time a statement, or opening a connection, may take before the connection
   * is dropped as silent (ConnectionError). Default: no limit.
   */
  statementTimeoutMs?: number;
}

/** A Driver on node-postgres, and the pool it runs on (yours, or one it made). */
export interface PgDriver extends Driver {
  readonly pool: PgPool;
}

/**
 * The driver on node-postgres: a small pool (or the caller's, never ended here),
 * plus one client held for LISTEN.
 */
export function pgDriver(options: PgDriverOptions): PgDriver {
  const limit = options.statementTimeoutMs;
  const handle = openPool(options, options.max, options.applicationName, limit);
  const pool = handle.pool;
  /** Set by abort(): every statement fails with it from then on. */
  let aborted: Error | undefined;
  /** abort()'s cancels of the statements it cut, still being delivered. */
  const cancels: Promise<void>[] = [];
  /** The connections this driver is using now (out of the pool, or its own for LISTEN): abort() cuts them. */
  const inUse = new Set<PgClient>();
  /** Checkouts still waiting for a connection: abort() fails them. */
  const waiting = new Set<(err: Error) => void>();
  /** Connections of a pool Sluice made that have their session settings (takeReady()). */
  const ready = new WeakSet<PgClient>();

  /**
   * A connection out of the pool, held in inUse until give() returns it. From a
   * pool of yours the wait is bounded by the statement limit: every connection
   * taken for good (LISTEN keeps one; a Queue's waitFor another) left a worker on
   * a pool of 1 or 2 waiting for ever, without a word (outside review 101). Pools
   * Sluice makes are sized for what it takes from them.
   */
  function take(): Promise<PgPoolClient> {
    if (aborted) return Promise.reject(aborted);
    return new Promise((resolve, reject) => {
      let gaveUp = false;
      const timer =
        handle.owned || limit === undefined
          ? undefined
          : setTimeout(() => {
              gaveUp = true;
              waiting.delete(reject);
              reject(poolExhausted(pool, limit));
            }, limit);
      waiting.add(reject);
      checkout(pool).then(
        (client) => {
          clearTimeout(timer);
          waiting.delete(reject);
          if (aborted) {
            client.release(aborted);
            if (!gaveUp) reject(aborted);
            return;
          }
          if (gaveUp) {
            client.removeListener('error', ignoreError);
            client.release();
            return;
          }
          inUse.add(client);
          resolve(client);
        },
        (err: unknown) => {
          clearTimeout(timer);
          waiting.delete(reject);
          // Every connection of a pool of Sluice's in use till the limit: pg-pool says
          // "timeout exceeded when trying to connect", though nothing was connecting (outside review 241).
          if (
            handle.owned &&
            limit !== undefined &&
            poolFull(pool) &&
            /timeout exceeded when trying to connect/.test(String(err))
          ) {
            reject(poolExhausted(pool, limit, 'own'));
            return;
          }
          // No connection: whatever waited for it was never sent.
          reject(markNeverConnected(err) as Error);
        },
      );
    });
  }

  /**
   * take(), with the session settings of a pool Sluice made (see
   * statements/session.ts) sent first on each of its connections. The statement
   * waits for them: through PgBouncer they may be what meets a server that cannot
   * be reached, and then their error is the statement's, which was never sent
   * (queued behind them, it failed with a bare "Connection terminated").
   */
  async function takeReady(): Promise<PgPoolClient> {
    const client = await take();
    if (!handle.owned || ready.has(client)) return client;
    try {
      await timeLimit(client.query(checkClientConnection), limit, () => destroyConnection(client), 'session settings', {
        hint: STATEMENT_HINT,
      });
    } catch (err) {
      // Answered with an error of its own: the connection serves anyway, without them.
      if (!reusableAfter(err)) {
        give(client, err as Error);
        // The connection failed before the statement went out on it.
        throw aborted ?? new NotSentError((err as Error).message, { cause: err });
      }
    }
    ready.add(client);
    return client;
  }

  /** Back to the pool; an error (or true) destroys the connection instead. */
  function give(client: PgPoolClient, err?: Error | boolean): void {
    inUse.delete(client);
    client.release(err);
  }

  async function connectListener(): Promise<{ client: PgClient; release(err?: Error): void }> {
    if (aborted) throw aborted;
    const url = options.listenConnectionString ?? options.connectionString;
    if (url) {
      const client = new pg.Client({
        connectionString: url,
        application_name: LISTEN_APPLICATION_NAME,
        connectionTimeoutMillis: limit ?? 0,
        keepAlive: true,
      });
      client.on('error', () => {});
      inUse.add(client);
      const release = () => {
        inUse.delete(client);
        void client.end().catch(() => {});
      };
      try {
        await client.connect();
      } catch (err) {
        release();
        throw err;
      }
      return { client, release };
    }
    const client = await takeReady();
    return { client, release: (err) => give(client, err ?? true) };
  }

  /** One statement, named or not, on the pool (bounded by the statement limit). */
  async function queryOnce(text: string, values: unknown[] | undefined, name: string | undefined, limitMs: number | undefined) {
    // Sluice's own parsers on every pool, yours too: its statements must read
    // their rows as it wrote them, whatever your pg.types say (see pg-encoding.ts).
    // Its array encoding only on a pool it made.
    const config = withSluiceTypes(text, handle.owned ? encodeArrays(values) : values);
    if (name) config.name = name;
    if (aborted) throw aborted;
    const own = shorterLimit(limit, limitMs);
    if (own === undefined) return poolQuery(config);
    const client = await takeReady();
    let cancelling: Promise<void> | undefined;
    try {
      const running = client.query(config);
      const result = await timeLimit(
        running,
        own,
        () => {
          // The session may still be waiting (on a lock) to run it: cancelled, it cannot
          // commit later, behind the error this caller is about to act on.
          cancelling = cancelThenDrop(client, running, CANCEL_LIMIT_MS);
        },
        'statement',
        { hint: STATEMENT_HINT },
      );
      client.removeListener('error', ignoreError);
      give(client);
      return result as { rows: any[] };
    } catch (err) {
      await cancelling;
      // A connection that failed keeps its listener: it may still report its end.
      if (reusableAfter(err) && !aborted) {
        client.removeListener('error', ignoreError);
        give(client);
      } else {
        give(client, err as Error);
      }
      throw aborted ?? err;
    }
  }

  /**
   * pool.query(), with the connection taken by take(): a failure to connect is
   * then told apart (markNeverConnected), where pool.query gave it as any other.
   * As pool.query does, a connection whose statement failed is dropped.
   */
  async function poolQuery(config: PgQueryConfig): Promise<{ rows: any[] }> {
    const client = await take();
    try {
      const result = await client.query(config);
      client.removeListener('error', ignoreError);
      give(client);
      return result;
    } catch (err) {
      give(client, err as Error);
      throw err;
    }
  }

  const driver: PgDriver = {
    pool,

    query: withUnnamedFallback(queryOnce),

    async transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T> {
      // A pool of yours leaves a checked-out client without an 'error' listener: a
      // connection lost between two statements would crash the process (review 47).
      const client = await takeReady();
      try {
        await client.query('BEGIN');
        const result = await fn({ query: (text, values) => client.query(withSluiceTypes(text, values)) });
        await client.query('COMMIT');
        client.removeListener('error', ignoreError);
        give(client);
        return result;
      } catch (err) {
        // A failed ROLLBACK means the connection is broken: destroy it rather than reuse it.
        const broken = await client.query('ROLLBACK').then(
          () => undefined,
          (e: Error) => e,
        );
        give(client, broken ?? undefined);
        throw aborted ?? err;
      }
    },

    async listen(channel: string, handlers: ListenHandlers): Promise<Listening> {
      const held = await connectListener();
      const { client } = held;
      let open = true;
      const lost = (err: Error) => {
        if (!open) return;
        open = false;
        client.removeAllListeners('notification');
        held.release(err);
        handlers.lost(err);
      };
      client.on('notification', (msg) => {
        if (msg.channel === channel) handlers.notification(msg.payload);
      });
      client.on('error', lost);
      client.on('end', () => lost(new Error('LISTEN connection ended')));
      try {
        await client.query(`LISTEN ${quoteIdent(channel)}`);
      } catch (err) {
        open = false;
        held.release(err as Error);
        throw err;
      }
      return {
        async close() {
          if (!open) return;
          open = false;
          client.removeAllListeners('notification');
          try {
            // A silent connection would never answer: closing must not wait for it.
            await timeLimit(
              client.query(`UNLISTEN ${quoteIdent(channel)}`),
              limit ?? CLOSE_LIMIT_MS,
              () => destroyConnection(client),
              'UNLISTEN',
            );
            held.release();
          } catch (err) {
            held.release(err as Error);
          }
        },
        async check(timeoutMs: number) {
          await timeLimit(
            client.query('SELECT 1'),
            timeoutMs,
            () => {
              destroyConnection(client);
              lost(new ConnectionError(`listen connection silent for ${timeoutMs} ms`));
            },
            'LISTEN connection check',
          );
        },
      };
    },

    abort(reason: Error) {
      if (aborted) return;
      aborted = reason;
      for (const fail of waiting) fail(reason);
      waiting.clear();
      // Cancelled before they are cut: a session waiting on a lock would otherwise run
      // its statement when the lock goes (outside review 65: a stopped worker's claim
      // took a job it never ran). end() waits for the cancels to be delivered.
      for (const client of inUse) {
        cancels.push(cancelThenDrop(client, Promise.resolve(), ABORT_CANCEL_LIMIT_MS));
      }
      // Connections the pool is still opening, which end() would wait for.
      handle.destroyAll();
    },

    async end() {
      const ending = handle.end();
      // After abort(): connections the pool opened since for checkouts that were
      // still queued. Ending, it opens no more; cut, they do not hold end() for
      // their connect timeout.
      if (aborted) handle.destroyAll();
      await Promise.all([ending, ...cancels]);
    },
  };
  return driver;
}

/** A statement read with Sluice's parsers (SLUICE_TYPES), which pg takes per query. */
function withSluiceTypes(text: string, values: unknown[] | undefined): PgQueryConfig {
  const config: PgQueryConfig & { types: typeof SLUICE_TYPES } = { text, values, types: SLUICE_TYPES };
  return config;
}
