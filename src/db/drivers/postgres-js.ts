import type { Sql, Options, TransactionSql } from 'postgres';
import { ConfigError, ConnectionError } from '../../errors.js';
import { quoteIdent } from '../identifiers.js';
import { LISTEN_APPLICATION_NAME, STATEMENT_HINT, type Driver, type ListenHandlers, type Listening } from '../driver.js';
import type { Queryable } from '../executor.js';
import { shorterLimit, timeLimit } from '../../lifecycle/time-limit.js';

export interface PostgresJsDriverOptions {
  connectionString?: string;
  /** The caller's postgres.js instance: its settings are copied; it is neither used nor ended. */
  sql?: PostgresJsSql;
  /** LISTEN through this URL instead (e.g. when `connectionString` goes through a transaction-mode pooler). */
  listenConnectionString?: string;
  max: number;
  applicationName: string;
  /** false: no server-side prepared statements (PgBouncer in transaction mode). Default true. */
  prepare?: boolean;
  /** Most time a statement may take; then the driver's connections are replaced (ConnectionError). */
  statementTimeoutMs?: number;
}

/**
 * The part of a postgres.js `sql` instance Sluice uses, spelled out so that
 * Sluice's types do not require postgres.js to be installed.
 */
export interface PostgresJsSql {
  unsafe(text: string, values?: any[]): PromiseLike<readonly any[]>;
  end(options?: { timeout?: number }): Promise<void>;
  readonly options: object;
}

/** A statement on postgres.js (the instance, or a transaction of it), returning `{ rows }`. */
async function run(sql: Sql | TransactionSql, text: string, values: unknown[] = []): Promise<{ rows: any[] }> {
  return start(sql, text, values).rows;
}

/** A statement sent, and how to cancel it. */
function start(
  sql: Sql | TransactionSql,
  text: string,
  values: unknown[] = [],
): { rows: Promise<{ rows: any[] }>; cancel(): void } {
  // postgres.js types an array parameter by its first element (`[true]` is sent
  // as bool, not bool[]), which then fails the statement's `$n::bool[]` cast.
  // Type 0 lets the server take the type from the cast instead.
  const params = values.map((v) => (Array.isArray(v) ? sql.typed(v as never, 0) : v));
  const query = sql.unsafe(text, params as never[]);
  return { rows: query.then((result) => ({ rows: [...result] })), cancel: () => query.cancel() };
}

type Postgres = (url?: string | Options<{}>, options?: Options<{}>) => Sql;

/** postgres.js is an optional peer dependency: load it only when a worker asks for it. */
async function loadPostgres(): Promise<Postgres> {
  try {
    return (await import('postgres')).default as unknown as Postgres;
  } catch (err) {
    throw new ConfigError('driver "postgres.js" needs the postgres package: npm i postgres', { cause: err });
  }
}

/** Sluice hands JSON over as text already; postgres.js would JSON.stringify it a second time. */
const jsonText = (x: unknown) => (typeof x === 'string' ? x : JSON.stringify(x));

/** json and jsonb: sent as the text Sluice made, read with JSON.parse. */
const JSON_TYPES = { sluiceJson: { to: 3802, from: [114, 3802], serialize: jsonText, parse: JSON.parse } };

/** postgres.js 4's parsed options (a rewrite: it resolves types per instance, `resolve`). */
const isVersion4 = (parsed: object) => 'resolve' in parsed && 'shared_types' in parsed;

interface ParsedOptions {
  parsers: Record<number, unknown>;
  serializers: Record<number, unknown>;
  transform: object;
  connection: Record<string, unknown>;
}

/**
 * The worker's driver on postgres.js. postgres.js prepares every statement on
 * its own, so statement names are not needed.
 *
 * The driver always talks through instances of its own. postgres.js serialises
 * a json/jsonb parameter with JSON.stringify, while Sluice's statements pass JSON
 * that is already text (payloads, results): its instances send that text as is.
 * Given the caller's `sql`, they copy its settings (host, credentials, TLS) and
 * leave the caller's instance untouched.
 *
 * LISTEN does not use `sql.listen()`: that re-LISTENs after a reconnect on its
 * own but silently gives up when the reconnect fails, and a first LISTEN that
 * failed poisons the channel for later attempts. A dedicated one-connection
 * instance reports every loss instead, and the notifier's own retry loop (the
 * same one the `pg` driver uses) takes over.
 */
export async function postgresJsDriver(options: PostgresJsDriverOptions): Promise<Driver> {
  const postgres = await loadPostgres();

  // postgres.js's default parsers, serialisers and transform, read once from an
  // instance that never connects: what the caller's instance is copied with.
  let plain: ParsedOptions | undefined;

  function instance(settings: Record<string, unknown>, url = options.connectionString): Sql {
    const connection = { application_name: settings.application_name };
    delete settings.application_name;
    if (!options.sql) return postgres(url!, { ...settings, types: JSON_TYPES, connection, onnotice: () => {} } as Options<{}>);
    // Reuse the caller's parsed options (what postgres.js's own listen() does): its
    // connection settings, but postgres.js's own parsers and no transform, with our
    // json serialisers. Sluice's statements must read their rows as they wrote them:
    // with the caller's `transform: postgres.camel` or `types`, the worker read
    // `max_attempts` as undefined and retried failing jobs for ever (outside review 69).
    const parsed = options.sql.options as ParsedOptions;
    plain ??= postgres({ max: 1, fetch_types: false }).options as unknown as ParsedOptions;
    const own = {
      ...(parsed as object),
      transform: plain.transform,
      onnotice: () => {},
      ...settings,
      connection: { ...parsed.connection, ...connection },
    };
    if (isVersion4(parsed)) {
      // postgres.js 4 builds its parsers and serialisers from `types` when the
      // instance is made (3 took them ready-made, below): the caller's custom types
      // and type inference left out, ours in; state of its own, not the caller's.
      return postgres({
        ...own,
        types: JSON_TYPES,
        infer: false,
        shared_types: undefined,
        shared: { retries: 0 },
        parameters: {},
      } as unknown as Options<{}>);
    }
    // Array parsers and serialisers come back as each connection fetches the types.
    return postgres({
      ...own,
      parsers: { ...plain.parsers },
      serializers: { ...plain.serializers, 114: jsonText, 3802: jsonText },
    } as unknown as Options<{}>);
  }

  const limit = options.statementTimeoutMs;
  // postgres.js counts its connect timeout in seconds.
  const connectTimeout = limit === undefined ? {} : { connect_timeout: Math.max(1, Math.ceil(limit / 1_000)) };
  const openInstance = () =>
    instance({
      max: options.max,
      prepare: options.prepare ?? true,
      application_name: options.applicationName,
      ...connectTimeout,
    });
  let sql = openInstance();
  // postgres.js cannot drop one connection: a statement past its limit replaces the
  // instance, closing its connections at once (statements in flight on them fail
  // and are retried by their callers).
  const replace = () => {
    const silent = sql;
    sql = openInstance();
    void silent.end({ timeout: 0 }).catch(() => {});
  };

  function listenInstance(onnotify: (channel: string, payload: string) => void, onclose: () => void): Sql {
    // onnotify is read by postgres.js (its own listen() uses it) but missing from its types.
    const settings = {
      max: 1,
      ...connectTimeout,
      idle_timeout: null,
      max_lifetime: null,
      fetch_types: false,
      application_name: LISTEN_APPLICATION_NAME,
      onnotify,
      onclose,
    };
    return instance(settings, options.listenConnectionString ?? options.connectionString);
  }

  /** Set by abort(): every statement fails with it from then on. */
  let aborted: Error | undefined;
  /** The LISTEN instances open now: abort() closes them too. */
  const listeners = new Set<Sql>();
  /** Statements sent and not settled: abort() cancels them (see the pg driver's abort()). */
  const inFlight = new Set<{ cancel(): void }>();

  return {
    query(text: string, values?: unknown[], _name?: string, limitMs?: number) {
      if (aborted) return Promise.reject(aborted);
      const statement = start(sql, text, values);
      // Cancelled before its connection goes: a session still waiting (on a lock) to
      // run it would otherwise run it later (see cancelStatement in cancel.ts).
      const expired = () => {
        statement.cancel();
        replace();
      };
      inFlight.add(statement);
      return timeLimit(statement.rows, shorterLimit(limit, limitMs), expired, 'statement', { hint: STATEMENT_HINT }).then(
        (result) => {
          inFlight.delete(statement);
          return result;
        },
        (err: unknown) => {
          inFlight.delete(statement);
          throw aborted ?? err;
        },
      );
    },

    transaction: <T>(fn: (tx: Queryable) => Promise<T>) =>
      aborted
        ? Promise.reject(aborted)
        : (sql.begin((tx) => fn({ query: (text, values) => run(tx, text, values) })) as Promise<T>),

    async listen(channel: string, handlers: ListenHandlers): Promise<Listening> {
      if (aborted) throw aborted;
      let open = true;
      const stop = () => {
        open = false;
        listeners.delete(listener);
        void listener.end({ timeout: 0 }).catch(() => {});
      };
      const listener = listenInstance(
        (c, payload) => {
          if (open && c === channel) handlers.notification(payload);
        },
        () => {
          if (!open) return;
          stop();
          handlers.lost(new Error('LISTEN connection closed'));
        },
      );
      listeners.add(listener);
      try {
        await listener.unsafe(`LISTEN ${quoteIdent(channel)}`);
      } catch (err) {
        stop();
        throw err;
      }
      return {
        async close() {
          if (!open) return;
          open = false;
          listeners.delete(listener);
          await listener.end({ timeout: 1 }).catch(() => {});
        },
        async check(timeoutMs: number) {
          await timeLimit(
            run(listener, 'SELECT 1'),
            timeoutMs,
            () => {
              if (!open) return;
              stop();
              handlers.lost(new ConnectionError(`listen connection silent for ${timeoutMs} ms`));
            },
            'LISTEN connection check',
          );
        },
      };
    },

    abort(reason: Error) {
      if (aborted) return;
      aborted = reason;
      for (const statement of inFlight) statement.cancel();
      // postgres.js ends an instance's connections at once with timeout 0: what is in flight fails.
      for (const instance of [sql, ...listeners]) void instance.end({ timeout: 0 }).catch(() => {});
    },

    end: () => sql.end({ timeout: aborted ? 0 : 5 }),
  };
}
