import type { WorkerStore } from '../db/store.js';
import type { Snooze } from '../errors.js';
import type { JobRow } from '../job.js';
import { isConnectionFailure } from '../errors.js';
import type { Emit, HandBackReason } from './events.js';

// The worker's writes that go out on their own rather than with a cycle: snoozes
// and hand-backs, both rare. Neither waits on a row another session holds locked:
// it asks again shortly.

/** A write skipped because another session held the row is tried again after this long. */
export const SKIPPED_RETRY_MS = 250;

/**
 * Back to pending now without spending the attempt the claim took (see
 * Completer.release). Rows another session holds are tried again until
 * `deadline`; returns the jobs not released. Throws when the database cannot be reached.
 */
export async function releaseJobs(store: WorkerStore, jobs: readonly JobRow[], deadline: number): Promise<JobRow[]> {
  let left = [...jobs];
  for (;;) {
    const { skipped } = await store.release(left.map((j) => j.id));
    left = left.filter((j) => skipped.has(j.id));
    if (left.length === 0 || Date.now() + SKIPPED_RETRY_MS > deadline) return left;
    await sleep(SKIPPED_RETRY_MS);
  }
}

/** A snooze or hand-back that failed for a lost connection is tried again after this long. */
const UNREACHABLE_RETRY_MS = 1_000;

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
  signals: { emit: Emit; dueAt(at: number): void; writeError(err: unknown, what: 'hand-back' | 'snooze'): void },
  stopping: AbortSignal,
  handBack?: HandBackReason,
): Promise<boolean> {
  const attempt = async (): Promise<Date | 'skipped' | 'unreachable' | undefined> => {
    try {
      return await store.snooze(job.id, job.attempts, snooze.runAt, snooze.delayMs);
    } catch (err) {
      if (isConnectionFailure(err) && !stopping.aborted) return 'unreachable';
      throw err;
    }
  };
  try {
    let runAt = await attempt();
    while (runAt === 'skipped' || runAt === 'unreachable') {
      if (stopping.aborted) return false;
      await sleep(runAt === 'skipped' ? SKIPPED_RETRY_MS : UNREACHABLE_RETRY_MS);
      runAt = await attempt();
    }
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

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
