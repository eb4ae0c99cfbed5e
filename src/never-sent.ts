import { causeChain, NotSentError } from './errors.js';

// Whether a failed statement was ever sent: what an enqueue's error tells the
// caller (a NotSentError, safe to retry, or "the job may exist").

// Driver codes of a connection that was never made: nothing can have been sent on it.
// 57P03: cannot connect now (the server is starting or stopping); 53300: too many connections;
// CONNECTION_ENDED: postgres.js refusing a statement once its `end()` was called (outside review 153).
const NEVER_CONNECTED = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  '57P03',
  '53300',
  'CONNECT_TIMEOUT',
  'CONNECTION_ENDED',
]);

/**
 * Errors a driver saw while opening a connection for a statement (the statement
 * was queued behind it, not sent), whatever their code: a connection reset or
 * closed during Postgres's startup said the job might exist (outside review 222).
 */
const failedToConnect = new WeakSet<object>();

/** Marks `err` as a failure to open the connection a statement was waiting for (see neverSent). */
export function markNeverConnected(err: unknown): unknown {
  if (err && typeof err === 'object') failedToConnect.add(err);
  return err;
}

/** True when `err` (or what it wraps) says the statement was never sent. */
export function neverSent(err: unknown): boolean {
  for (const e of causeChain(err)) {
    if (e instanceof NotSentError || failedToConnect.has(e)) return true;
    // A socket error before its TCP connection was made ("connect ECONNRESET"), on any driver.
    if ((e as { syscall?: unknown }).syscall === 'connect') return true;
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && NEVER_CONNECTED.has(code)) return true;
    // pg's words for a pool's and a client's connect timeout, and for a client (a caller's
    // `tx`) that refuses statements once its connection failed or it was closed; PgBouncer's
    // for a statement it could not hand to any server (Postgres refusing its logins, or none
    // free in time, or a server connection that failed the SETs of the client's startup
    // parameters, which PgBouncer sends before the client's statement: "invalid server
    // parameter"): it never reached Postgres (outside reviews 131, 149 and 150: told the job
    // might exist).
    if (
      e instanceof Error &&
      /timeout exceeded when trying to connect|Connection terminated due to connection timeout|^Client has encountered a connection error and is not queryable|^Client was closed and is not queryable|^server login has been failing|^pgbouncer cannot connect to server|^query_wait_timeout|^invalid server parameter/i.test(
        e.message,
      )
    ) {
      return true;
    }
  }
  return false;
}
