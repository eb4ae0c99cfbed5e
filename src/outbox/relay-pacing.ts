/** How long a partition's relay waits between passes and between retries. */

/** The longest wait between passes while committed messages wait behind an open transaction. */
const HORIZON_MAX_MS = 200;

/**
 * The wait after the `passes`-th pass in a row that found committed messages
 * behind a transaction still open: horizonRetryMs, doubling, up to 200 ms (or the
 * poll interval). A transaction left open (idle in transaction) kept every
 * partition at ~90 passes a second for as long as it lasted (outside review 74).
 */
export function horizonDelay(passes: number, o: { horizonRetryMs: number; pollIntervalMs: number }): number {
  const cap = Math.max(o.horizonRetryMs, Math.min(HORIZON_MAX_MS, o.pollIntervalMs));
  return Math.min(cap, o.horizonRetryMs * 2 ** Math.min(Math.max(0, passes - 1), 20));
}

/**
 * The relay's retry backoff, capped at a third of the lease: each retry renews the
 * lease first (holdLease), so a partition keeps it while it retries. With the
 * default 30 s cap, a refused message's later tries came after the 10 s lease had
 * run out: the relay lost its partition between tries, and another relay (or it,
 * taking it back) sent again what the broker already had (outside review 100).
 */
export function leaseKeepingBackoff(o: { retry: { minMs: number; maxMs: number }; leaseMs: number }): {
  minMs: number;
  maxMs: number;
} {
  const cap = Math.floor(o.leaseMs / 3);
  return { minMs: Math.min(o.retry.minMs, cap), maxMs: Math.min(o.retry.maxMs, cap) };
}
