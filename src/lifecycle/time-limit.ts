import { ConnectionError } from '../errors.js';

/**
 * `work`, or a ConnectionError once `ms` have passed without an answer (from
 * Postgres, or a broker: `from`; `hint` says what may have held it), after calling `onTimeout` (which drops the
 * connection that went silent, so it is never used again). A connection that stops carrying packets without being
 * closed (a dropped NAT entry, a failover that blackholes) is otherwise noticed
 * only by TCP keepalive, minutes later. No limit when `ms` is undefined.
 */
export function timeLimit<T>(
  work: Promise<T>,
  ms: number | undefined,
  onTimeout: () => void,
  what: string,
  { from = 'Postgres', hint }: { from?: string; hint?: string } = {},
): Promise<T> {
  if (ms === undefined) return work;
  let timer: NodeJS.Timeout | undefined;
  let settled = false;
  work.then(
    () => (settled = true),
    () => (settled = true),
  );
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      // After the event loop was held up (a handler blocking it), Node runs overdue
      // timers before it reads the sockets: the answer may be waiting unread. One
      // turn of the loop reads it first; dropped at once, a beat Postgres had
      // answered counted as unanswered and locks as lost (outside review 216).
      setImmediate(() => {
        if (settled) return;
        onTimeout();
        const why = hint ? ` (${hint})` : '';
        const err = new ConnectionError(`${what}: no answer from ${from} within ${ms} ms${why}; the connection was dropped`);
        outOfTime.add(err);
        reject(err);
      });
    }, ms);
  });
  return Promise.race([work, expired]).finally(() => clearTimeout(timer));
}

/** The shorter of two time limits, either of which may be none (undefined). */
export function shorterLimit(a: number | undefined, b: number | undefined): number | undefined {
  if (a === undefined) return b;
  return b === undefined ? a : Math.min(a, b);
}

/** The errors timeLimit() rejected with. */
const outOfTime = new WeakSet<object>();

/** True when `err` is timeLimit()'s: the work had no answer within its limit. */
export function isOutOfTime(err: unknown): boolean {
  return typeof err === 'object' && err !== null && outOfTime.has(err);
}
