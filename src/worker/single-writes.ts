import type { WorkerStore } from '../db/worker-store.js';
import type { Snooze } from '../errors.js';
import type { JobRow } from '../job.js';
import { isConnectionFailure, SluiceError } from '../errors.js';
import type { Emit, HandBackReason } from './events.js';

// The worker's writes that go out on their own rather than with a cycle: snoozes
// and hand-backs, both rare. Neither waits on a row another session holds locked:
// it asks again shortly.

/** A write skipped because another session held the row is tried again after this long. */
export const SKIPPED_RETRY_MS = 250;

/** What a release did: the jobs it gave back, and those still this worker's (rows another session held). */
export interface Released {
  released: JobRow[];
  left: JobRow[];
}

/**
 * Back to pending now without spending the attempt the claim took (see
 * Completer.release). Rows another session holds are tried again until
 * `deadline`. Jobs in neither list were no longer this worker's (rescued, say:
 * outside review 119 saw them told as handed back). Throws when the database
 * cannot be reached.
 */
export async function releaseJobs(store: WorkerStore, jobs: readonly JobRow[], deadline: number): Promise<Released> {
  let left = [...jobs];
  const released: JobRow[] = [];
  for (;;) {
    const { done, skipped } = await store.release(left.map((j) => j.id));
    released.push(...left.filter((j) => done.has(j.id)));
    left = left.filter((j) => skipped.has(j.id));
    // One last try at the deadline itself: rows freed in its last 250 ms were left (outside review 172).
    const wait = Math.min(SKIPPED_RETRY_MS, deadline - Date.now());
    if (left.length === 0 || wait <= 0) return { released, left };
    await sleep(wait);
  }
}

/** A snooze or hand-back that failed for a lost connection is tried again after this long. */
const UNREACHABLE_RETRY_MS = 1_000;

/** What the single writes report through. */
export interface SingleWriteSignals {
  emit: Emit;
  dueAt(at: number): void;
  writeError(err: unknown, what: 'hand-back' | 'snooze'): void;
}

/**
 * A job back to pending at the snooze time, the attempt not spent; reported through
 * `signals`, never thrown. With `handBack`, the worker's doing rather than the
 * handler's: told as 'jobs:handed-back' with that reason, not 'job:snooze'.
 * A row another session holds, and a connection lost (Postgres restarting, say),
 * are tried again until `stopping` fires: the job stays this worker's meanwhile,
 * heartbeated (outside review 108: a hand-back failed by a restart left the job
 * to the rescuer, its attempt spent). Returns false when given up at stop (the
 * job still this worker's, unwritten), true otherwise.
 */
export async function writeSnooze(
  store: WorkerStore,
  job: JobRow,
  snooze: Snooze,
  signals: SingleWriteSignals,
  stopping: AbortSignal,
  handBack?: HandBackReason,
): Promise<boolean> {
  try {
    const note = handBack === 'row-held' ? ROW_HELD_MESSAGE : undefined;
    const runAt = await untilLanded(() => store.snooze(job.id, job.attempts, snooze.runAt, snooze.delayMs, note), stopping);
    if (runAt === 'stopped') return false;
    if (runAt) {
      signals.dueAt(runAt.getTime());
      if (handBack) signals.emit('jobs:handed-back', [job], { reason: handBack });
      else signals.emit('job:snooze', job, { runAt });
    } else {
      signals.emit('job:lock-lost', job);
    }
  } catch (err) {
    // The job stays 'processing' until the rescuer returns it (spending the attempt).
    signals.writeError(err, handBack ? 'hand-back' : 'snooze');
    if (stopping.aborted && isConnectionFailure(err)) return false;
  }
  return true;
}

/** last_error of a job handed back because another session held its row (as the rescuer words it for such jobs). */
const ROW_HELD_MESSAGE =
  "another session held the job's row locked past the lock renewal timeout: its worker aborted the handler " +
  'and handed the job back (attempt not counted)';

/** last_error of a job handed back by handBackAfterRestart. */
const RESTART_MESSAGE =
  'Postgres restarted while the job ran: its worker could not renew the lock in time and aborted the handler ' +
  '(attempt not counted)';

/** ... and of one handed back because Postgres did not answer its worker's heartbeats (`unanswered`). */
const UNANSWERED_MESSAGE =
  "Postgres did not answer its worker's heartbeats past the lock renewal timeout (a lock on the jobs table, an " +
  'outage): the worker aborted the handler and handed the job back (attempt not counted)';

/**
 * A job whose handler was aborted while Postgres could not be reached (its lock
 * not renewed in time): handed back, the attempt not spent, if Postgres restarted
 * meanwhile, told as 'jobs:handed-back' with reason 'restart'; or, `unanswered`
 * (its beats went out and were not answered), if the job is still this worker's,
 * reason 'unanswered'. Tried again, as a
 * snooze is, until `stopping` fires. 'charge': the server did not restart (a
 * partition, or the worker's event loop blocked), or the statement failed;
 * 'refunded-before': it did, but the job's previous attempt was given back
 * already: the caller writes the failure as usual. 'stopped': given up at stop,
 * the job left to the rescuer.
 */
export async function handBackAfterRestart(
  store: WorkerStore,
  job: JobRow,
  signals: SingleWriteSignals,
  stopping: AbortSignal,
  unanswered = false,
): Promise<'charge' | 'refunded-before' | 'stopped' | 'done'> {
  try {
    const result = await untilLanded(
      () => store.handBackAfterRestart(job.id, job.attempts, RESTART_MESSAGE, unanswered ? UNANSWERED_MESSAGE : null),
      stopping,
    );
    if (result === 'stopped' || result === 'charge' || result === 'refunded-before') return result;
    if (result) {
      if (result.runAt) signals.dueAt(result.runAt.getTime());
      signals.emit('jobs:handed-back', [job], { reason: result.restarted ? 'restart' : 'unanswered' });
    } else {
      signals.emit('job:lock-lost', job);
    }
    return 'done';
  } catch (err) {
    signals.writeError(err, 'hand-back');
    return stopping.aborted && isConnectionFailure(err) ? 'stopped' : 'charge';
  }
}

/**
 * The error of an attempt that counts though Postgres restarted, or did not answer
 * its beats (the two refunds share one rule): the job's previous attempt was given
 * back already.
 */
export function refusedRefund(error: unknown): SluiceError {
  const message = error instanceof Error ? error.message : String(error);
  return new SluiceError(
    'LOCK_LOST',
    `${message}; such an attempt is given back, but this job's previous attempt was given back already, ` +
      'so this one counts (a job whose runs crash Postgres must still run out of attempts)',
    { cause: error },
  );
}

/**
 * Sends `write` again while it skips a row another session holds (every
 * SKIPPED_RETRY_MS) or the connection is lost (every UNREACHABLE_RETRY_MS, Postgres
 * restarting, say), until it lands or `stopping` fires ('stopped'). A connection
 * lost after `stopping` fired is thrown.
 */
async function untilLanded<T>(write: () => Promise<T | 'skipped'>, stopping: AbortSignal): Promise<T | 'stopped'> {
  for (;;) {
    let result: T | 'skipped' | 'unreachable';
    try {
      result = await write();
    } catch (err) {
      if (!isConnectionFailure(err) || stopping.aborted) throw err;
      result = 'unreachable';
    }
    if (result !== 'skipped' && result !== 'unreachable') return result;
    if (stopping.aborted) return 'stopped';
    await sleep(result === 'skipped' ? SKIPPED_RETRY_MS : UNREACHABLE_RETRY_MS);
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
