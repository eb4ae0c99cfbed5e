import type { JobError, JobRow } from '../job.js';
import { iso } from './time.js';

/** One run of a job, as the job page's history shows it. */
export interface Attempt {
  attempt: number;
  /** 'running' (handler started), 'claimed' (held by a worker, not started), or how it ended. */
  outcome: 'running' | 'claimed' | 'completed' | 'failed' | 'cancelled';
  startedAt: string | null;
  endedAt: string | null;
  /** Ended minus started; for a running attempt, so far. Null when either end is unknown. */
  durationMs: number | null;
  /** The worker's instance id (locked_by). */
  worker: string | null;
  /** The first line of the error, for a failed attempt. */
  error?: string;
}

/**
 * Every attempt of a job, oldest first: the failed ones from its `errors`
 * history, and the current or last one from the row (started_at, finished_at,
 * locked_by). A failed-for-good job's last attempt is both: the row adds its
 * start and worker to the history entry.
 */
export function attemptsOf(job: JobRow, now = new Date()): Attempt[] {
  const attempts: Attempt[] = (job.errors ?? []).map((e: JobError) =>
    attempt(e.attempt, 'failed', iso(e.started_at), iso(e.at), e.worker ?? null, e.message),
  );
  const started = iso(job.started_at);
  const last = attempts.find((a) => a.attempt === job.attempts);
  if (job.status === 'failed' && last) {
    const full = attempt(
      last.attempt,
      'failed',
      last.startedAt ?? started,
      last.endedAt,
      last.worker ?? job.locked_by,
      last.error,
    );
    attempts[attempts.indexOf(last)] = full;
  } else if (job.status === 'processing') {
    attempts.push(attempt(job.attempts, started ? 'running' : 'claimed', started, null, job.locked_by, undefined, now));
  } else if ((job.status === 'completed' || job.status === 'cancelled') && started && !last) {
    attempts.push(attempt(job.attempts, job.status, started, iso(job.finished_at), job.locked_by));
  }
  return attempts.sort((a, b) => a.attempt - b.attempt);
}

function attempt(
  n: number,
  outcome: Attempt['outcome'],
  startedAt: string | null,
  endedAt: string | null,
  worker: string | null,
  error?: string,
  now?: Date,
): Attempt {
  const end = endedAt ?? (now ? now.toISOString() : null);
  const durationMs = startedAt && end ? Math.max(0, Date.parse(end) - Date.parse(startedAt)) : null;
  return { attempt: n, outcome, startedAt, endedAt, durationMs, worker, ...(error === undefined ? {} : { error }) };
}
