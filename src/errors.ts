import { errorFields } from './logger.js';
import { inspect } from 'node:util';
import { storableDelay, storableTime, timeOf } from './time-range.js';

/**
 * Every error Sluice throws is a SluiceError with a literal `code`, so callers can
 * branch on `err.code` instead of parsing messages. The driver error, when there
 * is one, is kept as `cause`.
 */
export type SluiceErrorCode =
  | 'CONFIG'
  | 'VALIDATION'
  | 'CONNECTION'
  | 'DATABASE'
  | 'MIGRATION'
  | 'JOB_TIMEOUT'
  | 'LOCK_LOST'
  | 'PERMANENT_FAILURE'
  | 'DUPLICATE_JOB'
  | 'WAIT_TIMEOUT'
  | 'JOB_NOT_FOUND'
  | 'CANCELLED'
  | 'SNOOZE'
  | 'SHUTDOWN'
  | 'LISTENER';

export class SluiceError extends Error {
  readonly code: SluiceErrorCode;
  constructor(code: SluiceErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
  }
}

/** An option passed to a constructor or function is missing, unknown or out of range. */
export class ConfigError extends SluiceError {
  declare readonly code: 'CONFIG';
  constructor(message: string, options?: { cause?: unknown }) {
    super('CONFIG', message, options);
  }
}

/** A job (task name, payload, queue, schedule) is not acceptable; nothing was inserted. */
export class ValidationError extends SluiceError {
  declare readonly code: 'VALIDATION';
  constructor(message: string, options?: { cause?: unknown }) {
    super('VALIDATION', message, options);
  }
}

/** Postgres could not be reached or the connection dropped. Usually worth retrying. */
export class ConnectionError extends SluiceError {
  declare readonly code: 'CONNECTION';
  constructor(message: string, options?: { cause?: unknown }) {
    super('CONNECTION', message, options);
  }
}

/**
 * A ConnectionError from before anything was sent: no connection could be had
 * (refused, no such host, the server starting up, no free connection in a pool).
 * The statement did not run, so sending it again cannot duplicate anything.
 */
export class NotSentError extends ConnectionError {}

/** `err` and the errors it wraps (`cause`), at most five deep: whoever wrapped a driver's error, it is found. */
export function* causeChain(err: unknown): Generator<object> {
  for (let e = err, depth = 0; e && typeof e === 'object' && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    yield e;
  }
}

/** Postgres answered with an error (constraint, permission, syntax ...). */
export class DatabaseError extends SluiceError {
  declare readonly code: 'DATABASE';
  /** The SQLSTATE Postgres returned, e.g. `23505`. */
  readonly sqlState: string | undefined;
  constructor(message: string, sqlState: string | undefined, options?: { cause?: unknown }) {
    super('DATABASE', message, options);
    this.sqlState = sqlState;
  }
}

export class MigrationError extends SluiceError {
  declare readonly code: 'MIGRATION';
  constructor(message: string, options?: { cause?: unknown }) {
    super('MIGRATION', message, options);
  }
}

/** undefined_table, invalid_schema_name: what a statement on a schema that was never migrated fails with. */
const NOT_MIGRATED = new Set(['42P01', '3F000']);

/** True when `err` says Sluice's tables are not there (the schema was never migrated). */
export function isNotMigrated(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && NOT_MIGRATED.has(code);
}

/** undefined_column: a statement on a schema migrated by an older version of Sluice, not to the latest. */
export function isBehindMigrations(err: unknown): boolean {
  return (err as { code?: unknown } | null)?.code === '42703';
}

/** A lock wait ended by lock_timeout (lock_not_available). */
export function isLockTimeout(err: unknown): boolean {
  return (err as { code?: unknown } | null)?.code === '55P03';
}

/** insufficient_privilege: the role may not do this (the driver's error, or Sluice's DatabaseError of it). */
export function isInsufficientPrivilege(err: unknown): boolean {
  if (err instanceof DatabaseError) return err.sqlState === '42501';
  return (err as { code?: unknown } | null)?.code === '42501';
}

/** A handler ran longer than its task's timeout; the job is retried. */
export class JobTimeoutError extends SluiceError {
  declare readonly code: 'JOB_TIMEOUT';
  constructor(message: string) {
    super('JOB_TIMEOUT', message);
  }
}

/**
 * Thrown by a handler to fail the job at once, without further attempts
 * (bad input that no retry will fix).
 */
export class PermanentFailure extends SluiceError {
  declare readonly code: 'PERMANENT_FAILURE';
  constructor(message: string, options?: { cause?: unknown }) {
    super('PERMANENT_FAILURE', message, options);
  }
}

/**
 * enqueue with `jobKeyMode: 'error'` found another job holding the key. Nothing
 * was inserted. (In your own transaction the failed statement aborts it, as any
 * SQL error does: use a savepoint if you want to carry on.)
 */
export class DuplicateJobError extends SluiceError {
  declare readonly code: 'DUPLICATE_JOB';
  constructor(
    message: string,
    /** The job that holds the key. */
    readonly existingId: string | undefined,
    readonly jobKey: string | undefined,
    options?: { cause?: unknown },
  ) {
    super('DUPLICATE_JOB', message, options);
  }
}

/** Queue.waitFor() gave up before the job finished; the job itself is untouched. */
export class WaitTimeoutError extends SluiceError {
  declare readonly code: 'WAIT_TIMEOUT';
  constructor(
    message: string,
    readonly jobId: string,
  ) {
    super('WAIT_TIMEOUT', message);
  }
}

/** No job has that id (or it was deleted). */
export class JobNotFoundError extends SluiceError {
  declare readonly code: 'JOB_NOT_FOUND';
  /** `why`: what may have become of it, where the caller knows more than "no such job". */
  constructor(
    readonly jobId: string,
    why?: string,
  ) {
    super('JOB_NOT_FOUND', `no job with id ${jobId}${why ? ` (${why})` : ''}`);
  }
}

/** The reason a handler's AbortSignal carries when its job was cancelled (queue.cancel). */
export class JobCancelledError extends SluiceError {
  declare readonly code: 'CANCELLED';
  constructor(message: string) {
    super('CANCELLED', message);
  }
}

/**
 * The worker is stopping: the reason a handler's AbortSignal carries when stop()'s
 * grace period (shutdownTimeoutMs) ran out, and the error event for jobs it could
 * not hand back on the way out.
 */
export class WorkerStoppingError extends SluiceError {
  declare readonly code: 'SHUTDOWN';
  constructor(message: string, options?: { cause?: unknown }) {
    super('SHUTDOWN', message, options);
  }
}

/**
 * The worker's 'error' event for an exception thrown (or a promise rejected) by one
 * of your listeners of another event (of a Worker, or of an outbox relay's events).
 * It carries on as if the listener had returned: the event's other listeners are called, the job runs or its result
 * stands. `event` names the event whose listener failed; `cause` is what it threw.
 */
export class ListenerError extends SluiceError {
  declare readonly code: 'LISTENER';
  readonly event: string;
  constructor(event: string, cause: unknown) {
    // What cannot be made text (Object.create(null), a revoked Proxy) must not throw here (outside review 157).
    super('LISTENER', `a '${event}' listener threw: ${errorFields(cause).message} (carried on as if it had returned)`, {
      cause,
    });
    this.event = event;
  }
}

/**
 * Thrown by a handler to run the job again later WITHOUT spending an attempt:
 * "not yet" rather than "failed" (a rate limit, a resource not ready).
 *
 * @example
 *   if (!(await isReady(payload.reportId))) throw new Snooze(30_000); // again in 30 s
 *   throw new Snooze(new Date('2030-01-01T09:00:00Z'));               // again at that time
 */
export class Snooze extends SluiceError {
  declare readonly code: 'SNOOZE';
  /** When the job runs again: a Date, or null when `delayMs` counts from the write (server clock). */
  readonly runAt: Date | null;
  readonly delayMs: number;
  constructor(until: number | Date) {
    const time = timeOf(until);
    // Checked here, where the handler throws it: a time Postgres cannot store would
    // fail the write of the snooze, and the job would wait for the rescuer instead.
    if (time === undefined) {
      if (!storableDelay(until)) {
        throw new ValidationError(
          `Snooze: give a delay in ms (>= 0, ending before the year 10000) or a valid Date, got ${inspect(until)}`,
        );
      }
    } else if (!storableTime(time)) {
      throw new ValidationError(`Snooze: the Date must be within the years 1 to 9999, got ${new Date(time).toISOString()}`);
    }
    super('SNOOZE', time === undefined ? `snoozed for ${until as number} ms` : `snoozed until ${new Date(time).toISOString()}`);
    this.runAt = time === undefined ? null : new Date(time);
    this.delayMs = time === undefined ? (until as number) : 0;
  }
}

// SQLSTATE classes that mean "the connection, not the statement, is the problem".
// 08: connection exception; 57P01-57P03: admin shutdown, crash shutdown, cannot
// connect now (server starting or stopping).
const CONNECTION_STATES = /^(08|57P0[123])/;
const CONNECTION_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'ENOTFOUND',
  'EHOSTUNREACH',
  'EAI_AGAIN', // a DNS lookup that failed for now
  '53300', // too many connections: the server refused one more, for now
  // postgres.js's own codes for a lost or refused connection.
  'CONNECTION_CLOSED',
  'CONNECTION_ENDED',
  'CONNECTION_DESTROYED',
  'CONNECT_TIMEOUT',
]);

/** True when an error from the driver means the connection was lost or refused. */
export function isConnectionFailure(err: unknown): boolean {
  if (err instanceof ConnectionError) return true;
  if (!(err instanceof Error)) return false;
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'string' && (CONNECTION_STATES.test(code) || CONNECTION_CODES.has(code))) return true;
  // "Query read timeout": pg's query_timeout, on a pool of yours passed as tx: no reply in time, as from a silent network (outside review 118).
  return /Connection terminated|connection timeout|timeout exceeded when trying to connect|timeout expired|Client has encountered a connection error|not queryable|Query read timeout/i.test(
    err.message,
  );
}

/**
 * The server itself is down, not one connection lost: it refused a new connection
 * (nothing listening, or starting up, recovering, shutting down: 57P03) or ended a
 * session because another crashed (57P02). A session ended by pg_terminate_backend
 * (57P01) or a pooler says nothing of the server (outside review 114: counted, a
 * script killing the leader's connections held off every rescue).
 */
export function isServerDown(err: unknown): boolean {
  let e: unknown = err;
  for (let depth = 0; e instanceof Error && depth < 5; depth++, e = e.cause) {
    const code = (e as { code?: unknown }).code;
    if (code === '57P03' || code === '57P02' || code === 'ECONNREFUSED') return true;
  }
  return false;
}

/**
 * SQLSTATE classes of a refusal of a statement's values: 22 data exception, 23
 * integrity constraint violation, P0 PL/pgSQL (a trigger's RAISE EXCEPTION), 38
 * and 39 (a function or trigger that failed). Not 42 (a missing column means a
 * schema out of step with the code: every statement fails, whatever its values).
 */
const REFUSAL_CLASSES = new Set(['22', '23', 'P0', '38', '39']);

/**
 * True when Postgres refused the values of a statement (REFUSAL_CLASSES): sending
 * it again as it is likely fails again, where a lost connection or a deadlock
 * would not.
 */
export function isDataRejection(err: unknown): boolean {
  const code = err instanceof DatabaseError ? err.sqlState : (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && code.length === 5 && REFUSAL_CLASSES.has(code.slice(0, 2));
}

/**
 * One of Sluice's named statements already prepared, or not prepared, on the
 * connection it ran on (42P05, 26000): what a transaction-mode pooler that does not
 * track prepared statements causes (outside review 129: the message named nothing to do).
 */
export function isPoolerStatementClash(err: unknown): boolean {
  const e = err as { code?: unknown; message?: unknown } | null;
  return (
    (e?.code === '42P05' || e?.code === '26000') && typeof e.message === 'string' && /prepared statement "sluice-/.test(e.message)
  );
}

/**
 * A ConnectionError made below the part that met it (a statement's time limit,
 * "statement: no answer from Postgres…"; "cannot reach Postgres at…"), told
 * which part that was, unless it says so already ("worker stopping: …"). Of the
 * same class, so NotSentError stays NotSentError.
 */
export function connectionErrorIn(err: ConnectionError, context: string): ConnectionError {
  if (err.message.startsWith(context)) return err;
  const Kind = err.constructor as new (message: string, options?: { cause?: unknown }) => ConnectionError;
  return new Kind(`${context}: ${err.message}`, { cause: err });
}

/** Wraps a driver error in the matching typed error, keeping it as `cause`. */
export function wrapDatabaseError(err: unknown, context: string): SluiceError {
  if (err instanceof SluiceError) return err;
  const message = err instanceof Error ? err.message : String(err);
  if (isConnectionFailure(err)) return new ConnectionError(`${context}: ${message}`, { cause: err });
  const sqlState = (err as { code?: unknown } | null)?.code;
  // Sluice's own statements only come here: a table or schema missing means one never migrated.
  const hint = isNotMigrated(err)
    ? ' (run `sluice migrate` or migrate() first, or check the schema option)'
    : isPoolerStatementClash(err)
      ? ' (a transaction-mode pooler, such as PgBouncer before 1.21, moves named statements between ' +
        'connections: set preparedStatements: false, or --no-prepared-statements)'
      : '';
  return new DatabaseError(`${context}: ${message}${hint}`, typeof sqlState === 'string' ? sqlState : undefined, {
    cause: err,
  });
}
