import pg from 'pg';
import { causeChain, ConfigError, ConnectionError } from '../errors.js';
import type { DriverName } from './driver.js';
import type { PostgresJsSql } from './drivers/postgres-js.js';

/*
 * The parts of node-postgres Sluice uses, declared structurally (as Kysely does) so
 * that the published declarations need no @types/pg: a user without it still
 * type-checks with skipLibCheck off, and a user's pg.Pool (with @types/pg) is
 * accepted as is (tests/packaging-types.test.ts checks both).
 */

/** A statement as pg's `query(config)` takes it; `name` makes it a prepared statement. */
export interface PgQueryConfig {
  text: string;
  values?: unknown[];
  name?: string;
}

/** What a pg query resolves to, as far as Sluice reads it. */
export interface PgQueryResult {
  rows: any[];
}

/** A NOTIFY as a pg client reports it. */
export interface PgNotification {
  channel: string;
  payload?: string | undefined;
}

/** A pg Client (or a pool's client): statements, and the events a LISTEN connection needs. */
export interface PgClient {
  query(text: string, values?: unknown[]): Promise<PgQueryResult>;
  query(config: PgQueryConfig): Promise<PgQueryResult>;
  on(event: 'error', listener: (err: Error) => void): unknown;
  on(event: 'notification', listener: (message: PgNotification) => void): unknown;
  on(event: 'end', listener: () => void): unknown;
  removeListener(event: 'error', listener: (err: Error) => void): unknown;
  removeAllListeners(event: 'notification'): unknown;
}

/** A client checked out of a pg Pool; `release(err)` destroys it instead of reusing it. */
export interface PgPoolClient extends PgClient {
  release(err?: Error | boolean): void;
}

/** A pg Pool (`new pg.Pool(...)`) as Sluice uses it. */
export interface PgPool {
  query(text: string, values?: unknown[]): Promise<PgQueryResult>;
  query(config: PgQueryConfig): Promise<PgQueryResult>;
  connect(): Promise<PgPoolClient>;
  connect(callback: (err: Error | undefined, client: PgPoolClient | undefined, done: unknown) => void): void;
}

/**
 * The size of a pool of yours when a LISTEN would take one of its clients for good
 * (no URL of its own to LISTEN through) and it is too small to spare one (max 1):
 * every other statement then waited for ever (outside reviews 101, 103). Else undefined.
 */
export function poolTooSmallToListen(options: {
  pool?: unknown;
  connectionString?: string;
  listenConnectionString?: string;
}): number | undefined {
  if (options.listenConnectionString) return undefined;
  const max = yourPoolMax(options);
  return max !== undefined && max < 2 ? max : undefined;
}

/** The `max` of the pg pool of yours that Sluice runs on (none when a URL is given instead), if it says. */
function yourPoolMax(options: { pool?: unknown; connectionString?: string }): number | undefined {
  if (!options.pool || options.connectionString) return undefined;
  const max = (options.pool as { options?: { max?: unknown } }).options?.max;
  return typeof max === 'number' ? max : undefined;
}

/** Connections a Worker takes from its pool at most beside its handlers: a heartbeat, two cycles. */
const WORKER_OWN_CONNECTIONS = 3;

/**
 * Says, once per Worker given one, when your `pool` cannot hold every handler at
 * once and the worker's own statements: if the handlers take clients from it too,
 * they starve the heartbeats, locks expire, and the rescuer gives their jobs to
 * other workers while they still run (outside reviews 168 and 213: the quick
 * start's `pool works too` led there without a word). A warning, not an error:
 * handlers that use another pool are fine with a small one.
 */
export function warnIfPoolShared(options: { pool?: unknown; connectionString?: string }, concurrency: number): void {
  const max = yourPoolMax(options);
  if (max === undefined || max >= concurrency + WORKER_OWN_CONNECTIONS) return;
  process.emitWarning(
    `Worker: your pool's max is ${max}, under concurrency (${concurrency}) + ${WORKER_OWN_CONNECTIONS}: if its handlers ` +
      'take clients from the same pool, they can starve the heartbeats, and their jobs run twice. Give handlers a pool ' +
      `of their own, the Worker a connectionString, or this pool max ${concurrency + WORKER_OWN_CONNECTIONS} or more`,
    { code: 'SLUICE_POOL_SIZE' },
  );
}

/** Where Sluice gets its connections: a URL (Sluice owns the pool) or your `pg` Pool. */
export interface ConnectionOptions {
  /**
   * postgres://user:pass@host:port/db. Ignored when `pool` is given. Undefined is
   * taken as left out (`process.env.DATABASE_URL` type-checks under
   * exactOptionalPropertyTypes; outside review 174).
   */
  connectionString?: string | undefined;
  /** An existing pg Pool; Sluice never ends it. */
  pool?: PgPool | undefined;
  /** Postgres schema holding Sluice's tables. Default 'sluice'. */
  schema?: string | undefined;
}

/** Checks that `options` say where to connect; `what` names the caller in the ConfigError. */
export function checkConnection(options: ConnectionOptions, what: string): void {
  if (!options.pool && !options.connectionString) {
    throw new ConfigError(`${what}: give connectionString or pool`);
  }
  if (options.connectionString !== undefined && typeof options.connectionString !== 'string') {
    throw new ConfigError(`${what}: connectionString must be a string`);
  }
}

/** ConnectionOptions plus the choice of driver: what Queue and migrate accept (the Worker too). */
export interface DriverConnectionOptions extends ConnectionOptions {
  /**
   * 'pg' (node-postgres, the default) or 'postgres.js' (needs the optional
   * `postgres` package). Implied by `pool` (pg) or `sql` (postgres.js).
   */
  driver?: DriverName | undefined;
  /**
   * A postgres.js instance, `postgres(url, options)`, instead of `connectionString`:
   * Sluice opens its own connections with the same settings and never ends yours.
   */
  sql?: PostgresJsSql | undefined;
}

/**
 * The driver `options` ask for: `driver` if given, else postgres.js for `sql`
 * and pg otherwise. A ConfigError (naming `what`) when they contradict each
 * other. Whether there is a connection at all is the caller's check.
 */
export function resolveDriverName(options: DriverConnectionOptions, what: string): DriverName {
  const { driver, pool, sql } = options;
  if (driver !== undefined && driver !== 'pg' && driver !== 'postgres.js') {
    throw new ConfigError(`${what}: driver must be 'pg' or 'postgres.js', got ${JSON.stringify(driver)}`);
  }
  if (pool && sql) throw new ConfigError(`${what}: give pool (pg) or sql (postgres.js), not both`);
  if (sql && typeof sql.unsafe !== 'function') throw new ConfigError(`${what}: sql must be a postgres.js instance`);
  if ((pool || sql) && options.connectionString !== undefined) {
    throw new ConfigError(`${what}: give connectionString, pool or sql, one of them`);
  }
  if (sql) {
    if (driver === 'pg') throw new ConfigError(`${what}: sql is a postgres.js instance; use driver 'postgres.js'`);
    return 'postgres.js';
  }
  if (pool && driver === 'postgres.js') throw new ConfigError(`${what}: pool is a pg Pool; use driver 'pg' or pass sql`);
  if (options.connectionString !== undefined && typeof options.connectionString !== 'string') {
    throw new ConfigError(`${what}: connectionString must be a string`);
  }
  // Outside review 126: { pool: {}, connectionString } was taken, the pool unused or failing later.
  // A pg Client has connect() and query() too, but no release() for what it hands out (outside review 127).
  if (pool && (pool instanceof pg.Client || typeof pool.connect !== 'function' || typeof pool.query !== 'function')) {
    throw new ConfigError(`${what}: pool must be a pg Pool (a Client goes in as tx)`);
  }
  return driver ?? 'pg';
}

/** Whether `options` say where to connect (a URL, a pg Pool or a postgres.js instance). */
export function hasConnection(options: DriverConnectionOptions): boolean {
  return Boolean(options.pool || options.sql || options.connectionString);
}

/**
 * A pool Sluice uses, and whether Sluice made it (and so must end it).
 */
export interface PoolHandle {
  pool: PgPool;
  owned: boolean;
  /**
   * Cuts every connection of a pool made here, those still connecting included
   * (a connection attempt into a silent network otherwise holds end() for its
   * whole timeout). Nothing for the caller's pool: its connections are not ours.
   */
  destroyAll(): void;
  end(): Promise<void>;
}

/**
 * Closes a client's socket at once: end() would wait for a server that no longer
 * answers. The client then emits 'error' ("terminated unexpectedly"), which must
 * have a listener even while the client is checked out of its pool.
 */
export function destroyConnection(client: PgClient): void {
  client.on('error', () => {});
  (client as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream?.destroy();
}

/**
 * Wraps the caller's pool, or makes one from the connection string. `max` bounds
 * the connections a worker holds whatever its concurrency.
 */
export function openPool(
  options: ConnectionOptions,
  max: number,
  applicationName = 'sluice',
  connectTimeoutMs?: number,
): PoolHandle {
  if (options.pool) {
    return { pool: options.pool, owned: false, destroyAll: () => {}, end: async () => {} };
  }
  // Every client the pool makes, from before it connects until it ends (pg-pool's
  // documented Client option): destroyAll() needs the connecting ones too.
  const clients = new Set<PgClient>();
  class TrackedClient extends pg.Client {
    constructor(config?: string | pg.ClientConfig) {
      super(config);
      clients.add(this);
      this.once('end', () => clients.delete(this));
    }
  }
  const pool = new pg.Pool({
    Client: TrackedClient,
    connectionString: options.connectionString,
    max,
    application_name: applicationName,
    // Idle connections that the server drops (restart, pg_terminate_backend) emit
    // 'error' on the pool; without a listener that would crash the process.
    idleTimeoutMillis: 30_000,
    // A connection attempt into a blackhole would otherwise wait forever.
    connectionTimeoutMillis: connectTimeoutMs ?? 0,
    keepAlive: true,
    // Idle connections do not keep the process alive: a script that enqueues and
    // forgets close() exits at its end, not 30 s later (outside review 192).
    allowExitOnIdle: true,
  });
  pool.on('error', () => {});
  // pg-pool drops its own 'error' listener when a client is checked out, and a
  // termination (pg_terminate_backend, a restart) can arrive in the same tick as
  // the hand-over, before any listener of ours: without this one, that 'error'
  // would crash the process. The statement in flight fails with the error anyway.
  pool.on('connect', (client) => client.on('error', () => {}));
  let ended = false;
  return {
    pool,
    owned: true,
    destroyAll: () => {
      for (const client of clients) destroyConnection(client);
    },
    end: async () => {
      if (ended) return;
      ended = true;
      await pool.end();
    },
  };
}

/** Where a connection string points, without the password: for error messages. */
export function describeTarget(connectionString: string | undefined): string {
  if (!connectionString) return 'the configured pool';
  try {
    const url = new URL(connectionString);
    const db = decodeURIComponent(url.pathname.replace(/^\//, '')) || '(default database)';
    return `${url.hostname || 'localhost'}:${url.port || '5432'}/${db}`;
  } catch {
    return 'the configured database';
  }
}

/** A ConnectionError that names host, port and database but never the password. */
export function connectionError(err: unknown, connectionString: string | undefined): ConnectionError {
  const reason = err instanceof Error ? err.message : String(err);
  // PgBouncer's own refusals: the address and the limit are the pooler's, and saying
  // "Postgres" sent people to the wrong server (outside review 250).
  const pooler = POOLER_LIMITS.find(([pattern]) => pattern.test(reason));
  if (pooler) {
    return new ConnectionError(
      `the pooler at ${describeTarget(connectionString)} refused the connection: ${reason} (${pooler[1]}; see "Behind PgBouncer" in the README)`,
      { cause: err },
    );
  }
  return new ConnectionError(`cannot reach Postgres at ${describeTarget(connectionString)}: ${reason}`, { cause: err });
}

/** PgBouncer's refusals at connect time, and what to raise. */
const POOLER_LIMITS: readonly (readonly [RegExp, string])[] = [
  [/\(max_client_conn\)/, "raise PgBouncer's max_client_conn to cover every process's connections"],
  [/max_db_connections|max_user_connections/, "raise PgBouncer's max_db_connections or max_user_connections"],
  [
    /^(pgbouncer cannot connect to server|server login has been failing)/,
    'PgBouncer cannot log in to Postgres itself: see its log',
  ],
];

// SQLSTATEs of a server that answered but would not let us in, and what to do.
const LOGIN_REFUSED: Record<string, string> = {
  '28P01': 'check the user and password in the database URL', // invalid_password
  '28000': 'check the user in the database URL, and pg_hba.conf', // invalid_authorization_specification
  '3D000': 'create it, or fix the database name in the URL', // invalid_catalog_name
};

/** Begins the message of a login refused on a listenConnectionString of its own (the CLI names its flag instead). */
export const LISTEN_REFUSED = 'listenConnectionString: ';

/** A login that Postgres refused on a listenConnectionString of its own, as a ConfigError; undefined for other errors. */
export function listenLoginRefused(err: unknown, url: string): ConfigError | undefined {
  const refused = loginProblem(err, url);
  return refused === undefined ? undefined : new ConfigError(`${LISTEN_REFUSED}${refused}`, { cause: err });
}

/**
 * An error whose cause is that the server answered and refused the login or has
 * no such database (not that it could not be reached), worded as what it is; or
 * undefined. Found on the error itself or on its causes, whoever wrapped it.
 */
export function loginProblem(err: unknown, url: string | undefined): string | undefined {
  for (const e of causeChain(err)) {
    const { code, message, severity } = e as { code?: unknown; message?: unknown; severity?: unknown };
    const hint = refusalHint(code, String(message), severity);
    if (hint) return `Postgres at ${describeTarget(url)}: ${String(message)} (${hint})`;
  }
  return undefined;
}

function refusalHint(code: unknown, message: string, severity: unknown): string | undefined {
  // A role without CONNECT on the database is refused at login with 42501 (outside review 153);
  // the same words without FATAL are a missing CREATE on it, after the login (review 156).
  if (code === '42501')
    return severity === 'FATAL' && /^permission denied for database/.test(message)
      ? 'grant the role CONNECT on the database'
      : undefined;
  // PgBouncer refuses a login with 08P01, the code of its passing outages too ("server
  // login has been failing"): told apart by its words (outside review 176: waited for ever).
  if (code === '08P01' && /authentication failed|^no such (user|database)/.test(message)) {
    return "check the user and password in the database URL, and the pooler's auth_file and databases";
  }
  // pg's own words when the server asks for a password the URL does not give (outside review 154).
  if (/client password must be a string/.test(message)) return 'the server asks for a password: give it in the database URL';
  return typeof code === 'string' ? LOGIN_REFUSED[code] : undefined;
}
