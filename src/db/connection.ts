import pg from 'pg';
import { ConfigError, ConnectionError } from '../errors.js';

/** Where Sluice gets its connections: a URL (Sluice owns the pool) or your `pg` Pool. */
export interface ConnectionOptions {
  /** postgres://user:pass@host:port/db. Ignored when `pool` is given. */
  connectionString?: string;
  /** An existing pg Pool; Sluice never ends it. */
  pool?: pg.Pool;
  /** Postgres schema holding Sluice's tables. Default 'sluice'. */
  schema?: string;
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

/**
 * A pool Sluice uses, and whether Sluice made it (and so must end it).
 */
export interface PoolHandle {
  pool: pg.Pool;
  owned: boolean;
  end(): Promise<void>;
}

/**
 * Wraps the caller's pool, or makes one from the connection string. `max` bounds
 * the connections a worker holds whatever its concurrency.
 */
export function openPool(options: ConnectionOptions, max: number, applicationName = 'sluice'): PoolHandle {
  if (options.pool) {
    return { pool: options.pool, owned: false, end: async () => {} };
  }
  const pool = new pg.Pool({
    connectionString: options.connectionString,
    max,
    application_name: applicationName,
    // Idle connections that the server drops (restart, pg_terminate_backend) emit
    // 'error' on the pool; without a listener that would crash the process.
    idleTimeoutMillis: 30_000,
  });
  pool.on('error', () => {});
  let ended = false;
  return {
    pool,
    owned: true,
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
  return new ConnectionError(`cannot reach Postgres at ${describeTarget(connectionString)}: ${reason}`, { cause: err });
}
