/**
 * Whether a write through a caller's `pg` client committed on its own: the client
 * ran no BEGIN (or its transaction had ended), so the job or message did not share
 * the caller's transaction. That cannot be known before the statement, only from
 * the server's answer to it: each ReadyForQuery carries the session's transaction
 * status ('I' idle, 'T' in a transaction, 'E' in a failed one).
 */

interface ProtocolConnection {
  on(event: 'readyForQuery', listener: (msg: { status?: unknown }) => void): unknown;
}

/** The status of the last statement each watched client ran. */
const lastStatus = new WeakMap<object, unknown>();
/** Clients already warned about, so that a loop of enqueues says it once each. */
const warned = new WeakSet<object>();

/** pg's Client and PoolClient keep their protocol connection, an EventEmitter, as `connection`. */
function protocolConnection(tx: object): ProtocolConnection | undefined {
  const connection = (tx as { connection?: unknown }).connection;
  if (typeof connection !== 'object' || connection === null) return undefined;
  return typeof (connection as { on?: unknown }).on === 'function' ? (connection as ProtocolConnection) : undefined;
}

/**
 * Starts following the transaction status of `tx`, when it is a pg client. Called
 * before a write: the ReadyForQuery that ends the write is seen here in the same
 * event as pg settles the write's promise, so the code after its await reads the
 * write's status.
 */
export function watchTransactionStatus(tx: object): void {
  if (lastStatus.has(tx)) return;
  const connection = protocolConnection(tx);
  if (!connection) return;
  lastStatus.set(tx, undefined);
  connection.on('readyForQuery', (msg) => lastStatus.set(tx, msg.status));
}

/**
 * After a write through `tx`: a process warning (SLUICE_TX_AUTOCOMMIT, once per
 * client) when the server said the session was in no transaction after it, that
 * is, the write committed at once. Not an error: the write is done and cannot be
 * taken back, and a caller that retried on an error would write it twice.
 */
export function warnIfAutocommitted(tx: object, what: string): void {
  if (lastStatus.get(tx) !== 'I' || warned.has(tx)) return;
  warned.add(tx);
  process.emitWarning(
    `${what} through a pg client that is in no transaction (no BEGIN, or after its COMMIT or ROLLBACK): it committed at once, ` +
      'on its own, and does not roll back with your data. Run BEGIN on the client first, or leave tx out',
    { code: 'SLUICE_TX_AUTOCOMMIT' },
  );
}
