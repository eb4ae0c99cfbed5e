import { destroyConnection, type PgClient } from '../connection.js';
import { cancelStatement } from '../cancel-request.js';

/** Longest a connection whose statement is being cancelled stays open for the cancel to land (see cancelThenDrop). */
const DROP_AFTER_CANCEL_MS = 250;

/**
 * Cancels the statement `running` on `client` and drops the connection, in that
 * order: dropped first, the connection's end reached PgBouncer before the cancel
 * did, PgBouncer found no client to cancel for, and the server session ran the
 * statement when its lock went (outside review 149: 10 of 17 enqueues that timed
 * out behind a table lock committed, seconds after the caller was told they
 * failed). Dropped once the cancel is delivered and the statement has ended (its
 * error comes back on the connection), or after DROP_AFTER_CANCEL_MS, whichever is
 * first: on a silent network the cancel never arrives, and the connection goes as
 * before. Resolves once the cancel is delivered, or after `ms`.
 */
export async function cancelThenDrop(client: PgClient, running: Promise<unknown>, ms: number): Promise<void> {
  const cancelled = cancelStatement(client, ms);
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    cancelled
      .then(() => running)
      .then(
        () => {},
        () => {},
      ),
    new Promise<void>((resolve) => (timer = setTimeout(resolve, DROP_AFTER_CANCEL_MS))),
  ]);
  clearTimeout(timer);
  destroyConnection(client);
  await cancelled;
}
