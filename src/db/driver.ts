import type { Queryable } from './executor.js';

/** The client library a worker talks to Postgres through. */
export type DriverName = 'pg' | 'postgres.js';

/**
 * What the worker needs from a Postgres driver, and nothing more: run a
 * statement, hold one LISTEN, and close. `pg` and postgres.js each implement it
 * in src/db/drivers/, so the worker runs on either without knowing which.
 */
export interface Driver extends Queryable {
  /**
   * Runs a parameterised statement and returns its rows. `name` asks for a named
   * prepared statement (parsed once per connection) where the driver needs to be
   * told; a driver that prepares every statement anyway ignores it. `limitMs`: a
   * time limit of this statement's own, where shorter than the driver's statement
   * time limit (the same cancel and dropped connection past it).
   */
  query<T = any>(text: string, values?: unknown[], name?: string, limitMs?: number): Promise<{ rows: T[] }>;
  /** Runs `fn` in a transaction on one connection: COMMIT when it resolves, ROLLBACK when it throws. */
  transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T>;
  /** LISTENs on `channel` over a connection of its own; resolves once LISTEN is in place. */
  listen(channel: string, handlers: ListenHandlers): Promise<Listening>;
  /**
   * Gives up at once: every statement in flight fails with `reason` (its connection
   * is cut), and so does every later one. For a stop that must not wait for a
   * network gone silent; end() still closes what is left.
   */
  abort(reason: Error): void;
  /** Closes the connections this driver opened (a pool or `sql` the caller gave is left open). */
  end(): Promise<void>;
}

/** What LISTEN connections call themselves (pg_stat_activity), whichever component opens them. */
export const LISTEN_APPLICATION_NAME = 'sluice-listen';

/**
 * Why a statement past its time limit may have had no answer: the same timeout
 * covers a network gone silent and a statement held by a lock (outside review 87:
 * a lock wait read as a network failure).
 */
export const STATEMENT_HINT = 'a silent network, or a statement that waited on a lock or ran that long; a cancel was sent';

export interface ListenHandlers {
  notification(payload: string | undefined): void;
  /** The LISTEN connection is gone for good; the caller opens a new one with listen(). */
  lost(err: Error): void;
}

export interface Listening {
  /** UNLISTEN and give the connection back. */
  close(): Promise<void>;
  /**
   * One round trip on the LISTEN connection. Not answered within `timeoutMs`, the
   * connection is dropped (ListenHandlers.lost follows) and this rejects: a
   * connection that went silent without being closed would otherwise deliver no
   * notification, and report nothing, for as long as TCP keeps it.
   */
  check(timeoutMs: number): Promise<void>;
}
