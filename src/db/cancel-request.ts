import { connect } from 'node:net';

/** The protocol's CancelRequest code (1234 << 16 | 5678). */
const CANCEL_REQUEST_CODE = 80877102;

/** What a connected node-postgres client knows of its session. */
interface SessionKeys {
  host?: string;
  port?: number;
  processID?: number | null;
  secretKey?: number | null;
}

/**
 * Asks Postgres to cancel the statement `client`'s session is running: the
 * protocol's CancelRequest, on a connection of its own, naming the session by the
 * key it was given at connect. Dropping a connection whose statement went past
 * its limit does not stop that statement: a session waiting on a lock (a LOCK
 * TABLE, a schema change) notices the closed socket only when it next writes, and
 * so ran a worker's claim seconds later, for jobs nobody held (outside review 61:
 * rescued as started, their attempts spent without running). Cancelled, the
 * statement rolls back at once.
 *
 * It needs no privilege (the key is the proof) and goes through PgBouncer, which
 * forwards it to the right server session. Postgres answers nothing and closes
 * the connection once it has signalled the session: resolves then, or after
 * `ms`, and never rejects (the statement's own error is what the caller reports).
 */
export function cancelStatement(client: object, ms: number): Promise<void> {
  const { host, port, processID, secretKey } = client as unknown as SessionKeys;
  if (typeof processID !== 'number' || typeof secretKey !== 'number' || !port) return Promise.resolve();
  return new Promise((resolve) => {
    const socket = host?.startsWith('/') ? connect(`${host}/.s.PGSQL.${port}`) : connect(port, host || 'localhost');
    const timer = setTimeout(() => socket.destroy(), ms);
    socket.on('error', () => socket.destroy());
    socket.on('close', () => {
      clearTimeout(timer);
      resolve();
    });
    socket.on('connect', () => {
      const request = Buffer.alloc(16);
      request.writeInt32BE(16, 0);
      request.writeInt32BE(CANCEL_REQUEST_CODE, 4);
      request.writeInt32BE(processID, 8);
      request.writeInt32BE(secretKey, 12);
      socket.write(request);
    });
  });
}
