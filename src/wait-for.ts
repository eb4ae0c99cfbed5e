import type { Queryable } from './db/executor.js';
import { rows } from './db/executor.js';
import { channelFor } from './db/identifiers.js';
import type { EnqueueStatements } from './db/statements/enqueue.js';
import {
  ConfigError,
  DatabaseError,
  isInsufficientPrivilege,
  isLockTimeout,
  JobNotFoundError,
  WaitTimeoutError,
  wrapDatabaseError,
} from './errors.js';
import { isFinished, type JobRow } from './job.js';
import { withJobDates } from './job-values.js';
import type { OutcomeListener } from './outcome-listener.js';

/** Longest the flag waits for a row lock another session holds (see watchJob). */
const FLAG_LOCK_WAIT_MS = 250;
/** How often a job that could not be flagged (its row held by another session) is read, and the flag tried again. */
const UNFLAGGED_POLL_MS = 250;

export interface WaitPlan {
  db: Queryable;
  /** On the Queue's own connection; `listening` settles once its LISTEN is set up. */
  outcomes: OutcomeListener;
  listening: Promise<void>;
  queries: Pick<EnqueueStatements, 'schema' | 'watchJob' | 'jobWatched' | 'getJob'>;
  timeoutMs: number;
  pollIntervalMs: number;
  /** Aborted when the Queue is closed: the wait ends at once. */
  closing: AbortSignal;
}

/**
 * What a waitFor() in flight rejects with when its Queue is closed. Said plainly: it
 * was "DatabaseError: waitFor failed: Cannot use a pool after calling end on the
 * pool" (outside review 101).
 */
export function closedWhileWaiting(jobId: string): ConfigError {
  return new ConfigError(`waitFor: the Queue was closed while it waited for job ${jobId}`);
}

/**
 * Queue.waitFor() once its options are checked: flags job `jobId` for a
 * notification, then reads it until it is finished, woken by the notification or
 * every `pollIntervalMs`. Throws WaitTimeoutError after `timeoutMs`.
 */
export async function waitForJob<P, R>(jobId: string, plan: WaitPlan): Promise<JobRow<P, R>> {
  const { db, outcomes, listening, queries, timeoutMs, pollIntervalMs, closing } = plan;
  // Awaited after the flag: a failure to listen meanwhile is not unhandled.
  listening.catch(() => {});
  const closed = () => closedWhileWaiting(jobId);
  let wake: () => void = () => {};
  const unsubscribe = outcomes.subscribe(jobId, () => wake());
  const deadline = Date.now() + timeoutMs;
  // Flag the job for a notification first, then read it: an outcome written after
  // the flag is announced, one written before it is read below. A row that another
  // session holds longer than FLAG_LOCK_WAIT_MS is not flagged (see watchJob):
  // until it is, the job is read again every UNFLAGGED_POLL_MS and the flag tried
  // again before each read.
  const watch = async (): Promise<boolean> => {
    const lockWaitMs = Math.max(1, Math.min(FLAG_LOCK_WAIT_MS, deadline - Date.now()));
    try {
      return (await rows(db, queries.watchJob, [jobId, channelFor(queries.schema), String(lockWaitMs)])).length > 0;
    } catch (err) {
      if (isLockTimeout(err)) return false;
      if (isInsufficientPrivilege(err)) return flaggedAlready(db, queries, jobId, err);
      throw err;
    }
  };
  try {
    // The flag goes out while LISTEN is set up, not after it: every moment before the
    // flag commits is one in which a worker with completedJobs 'delete' may complete
    // and delete the job (outside review 219). An outcome announced before LISTEN is
    // not heard, and is read below.
    let flagged = await watch();
    await listening;
    // close() while LISTEN was being set up.
    if (closing.aborted) throw closed();
    for (;;) {
      const job = withJobDates((await rows<JobRow<P, R>>(db, queries.getJob, [jobId]))[0]);
      if (!job) {
        // The same error for an id that never existed: say what else it may be (outside review 219).
        throw new JobNotFoundError(
          jobId,
          "never enqueued, or gone: a worker with completedJobs 'delete' deletes a completed job not flagged for " +
            'waitFor (enqueue it with waitable: true), and the history drops jobs past its retention',
        );
      }
      if (isFinished(job.status)) return job;
      const left = deadline - Date.now();
      if (left <= 0)
        throw new WaitTimeoutError(`job ${jobId} did not finish within ${timeoutMs} ms (status ${job.status})`, jobId);
      const pause = flagged ? pollIntervalMs : Math.min(pollIntervalMs, UNFLAGGED_POLL_MS);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.min(left, pause));
        wake = () => {
          clearTimeout(timer);
          closing.removeEventListener('abort', wake);
          resolve();
        };
        // Closed during the read above: an aborted signal fires no more events.
        if (closing.aborted) wake();
        else closing.addEventListener('abort', wake);
      });
      if (closing.aborted) throw closed();
      flagged ||= await watch();
    }
  } catch (err) {
    throw closing.aborted ? closed() : wrapDatabaseError(err, 'waitFor failed');
  } finally {
    unsubscribe();
  }
}

/**
 * For a role that may not flag a job (only the schema's owner may, under
 * roles.sql): a job enqueued with `waitable: true` is flagged already, and is
 * waited for with reads alone (outside review 227: a least-privilege role could
 * enqueue waitable jobs and never wait for them). A job that is not flagged is
 * refused, saying why; one that is gone is left to the read that follows.
 */
async function flaggedAlready(
  db: Queryable,
  queries: Pick<EnqueueStatements, 'jobWatched'>,
  jobId: string,
  refused: unknown,
): Promise<true> {
  const [row] = await rows<{ watched: boolean }>(db, queries.jobWatched, [jobId]);
  if (!row || row.watched) return true;
  throw new DatabaseError(
    `waitFor failed: ${(refused as Error).message} (waitFor flags a job for the notification of its outcome, ` +
      "which only the schema's owner may do; enqueue the job with waitable: true, and a role that may read " +
      'the jobs waits for it)',
    '42501',
    { cause: refused },
  );
}
