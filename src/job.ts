import type { BackoffOptions } from './worker/backoff.js';

/** Where a job is in its life: pending → processing → completed | failed (or cancelled). */
export type JobStatus = 'pending' | 'processing' | 'completed' | 'failed' | 'cancelled';

/** The statuses a job stays in for good (until retried or pruned). */
export type FinishedStatus = 'completed' | 'failed' | 'cancelled';

/** A status a job has not finished in: waiting, or running on a worker. */
export type UnfinishedStatus = Exclude<JobStatus, FinishedStatus>;

export const JOB_STATUSES: readonly JobStatus[] = ['pending', 'processing', 'completed', 'failed', 'cancelled'];

/** Finished statuses: what Queue.waitFor() waits for, what deleteFinished and the pruner may remove. */
export const FINISHED: readonly FinishedStatus[] = ['completed', 'failed', 'cancelled'];

/** Statuses a job can be retried from. */
export const RETRYABLE: readonly JobStatus[] = ['failed', 'cancelled'];

/**
 * Statuses cancelJob takes a job out of: it has not finished. A pending job just
 * becomes 'cancelled'; a running one also has its worker abort the handler.
 */
export const CANCELLABLE: readonly UnfinishedStatus[] = ['pending', 'processing'];

/** Statuses a job can be deleted in: anything a worker is not running right now. */
export const DELETABLE: readonly JobStatus[] = ['pending', 'completed', 'failed', 'cancelled'];

/** True when a job in this status has finished (completed, failed for good, or cancelled). */
export function isFinished(status: JobStatus): status is FinishedStatus {
  return (FINISHED as readonly JobStatus[]).includes(status);
}

/** The queue a job goes to when none is named. */
export const DEFAULT_QUEUE = 'default';

/** What enqueue does when another job holds the same `jobKey`. */
export type JobKeyMode = 'keep' | 'replace' | 'error';

/** How one job is enqueued: everything but its task and payload. */
export interface JobOptions {
  /** Queue name. Default 'default'. */
  queue?: string | undefined;
  /** Run no earlier than this time. */
  runAt?: Date | undefined;
  /** Run no earlier than this many ms from now (server clock). */
  delayMs?: number | undefined;
  /** Attempts before the job is marked failed. Default 5. */
  maxAttempts?: number | undefined;
  /** Higher runs first among due jobs. Default 0. */
  priority?: number | undefined;
  /**
   * Group key (1–128 characters): a tenant, a customer, an API account. Workers
   * take the jobs of a queue with groups round-robin across its groups, and
   * group concurrency and rate limits apply per group (see setGroupSettings).
   * null, like leaving it out, means no group.
   */
  group?: string | null | undefined;
  /**
   * Deduplication key (1–512 characters, one namespace for all queues and tasks).
   * While a job with this key is pending (or also running, with
   * `jobKeyWhileProcessing`), enqueueing again does not add a second job:
   * see `jobKeyMode`. Race-free: concurrent enqueues meet in a unique index.
   */
  jobKey?: string | undefined;
  /**
   * 'keep' (default): leave the existing job, return its id. 'replace': give the
   * existing job this payload and run time if it has not started (a running one is
   * kept), return its id. 'error': throw DuplicateJobError.
   */
  jobKeyMode?: JobKeyMode | undefined;
  /** Also hold the key while the job runs and between its retries. Default false. */
  jobKeyWhileProcessing?: boolean | undefined;
  /**
   * Flag the job for `waitFor()` as it is inserted: its outcome is announced, and
   * its row kept when it completes, whatever the worker's `completedJobs`. Without
   * it, a worker with `completedJobs: 'delete'` can complete and delete the job
   * before a `waitFor()` called right after the enqueue flags it (JobNotFoundError).
   * Default false. Not with `jobKey` (a ValidationError).
   */
  waitable?: boolean | undefined;
}

/** One job to enqueue (enqueueMany, enqueueAfterCommit). */
export interface JobSpec<P = unknown> extends JobOptions {
  task: string;
  payload?: P;
}

/**
 * A job of a typed task map: the payload must be its task's, and given unless its
 * type takes undefined, as enqueue() asks (outside review 202: a missing payload
 * compiled, and stored {}).
 */
export type TaskSpec<T extends TaskMap = AnyTasks> = {
  [K in keyof T & string]: Omit<JobSpec<T[K]>, 'payload'> & { task: K } & (undefined extends T[K]
      ? { payload?: T[K] }
      : { payload: T[K] });
}[keyof T & string];

/**
 * A row of the jobs table as Sluice reads it. Ids are strings: bigint does not fit
 * a JS number. `P` types the payload, `R` the result (both as you assert them: the
 * row is read, not checked).
 */
export interface JobRow<P = unknown, R = unknown> {
  id: string;
  queue: string;
  task: string;
  payload: P;
  status: JobStatus;
  priority: number;
  run_at: Date;
  attempts: number;
  max_attempts: number;
  locked_at: Date | null;
  locked_by: string | null;
  last_error: string | null;
  created_at: Date;
  updated_at: Date;
  finished_at: Date | null;
  /**
   * When the handler started on this attempt; null while pending, and while
   * processing but claimed ahead, waiting for a slot in its worker.
   */
  started_at: Date | null;
  /** W3C trace context of the span that enqueued the job (OpenTelemetry), or null. */
  trace_context: Record<string, string> | null;
  /** The deduplication key given at enqueue, if any (kept after it stops counting). */
  job_key: string | null;
  /** The group given at enqueue (fair claims, group limits), or null. */
  group_key: string | null;
  /** Read by getJob / dead-letter views only: 'pending' | 'active' | 'released' while a key exists. */
  key_scope?: string | null;
  /** Every failed attempt, oldest first (getJob / dead-letter views only). */
  errors?: JobError[];
  /** What the handler returned (getJob only; null until completed or when it returned nothing). */
  result?: R | null;
  /** The last progress the handler reported (getJob only). */
  progress?: unknown;
  /** listJobs / searchJobs rows only: whether the row is in the history (moved there by the pruner). */
  archived?: boolean;
}

/** One failed attempt in a job's error history. */
export interface JobError {
  attempt: number;
  /** ISO time of the failure (server clock). */
  at: string;
  /** First line of the error ("Name: message"). */
  message: string;
  /** The stack (or whatever was thrown, as text); absent for rescues. */
  stack?: string;
  /** When the attempt started and on which worker (entries written before these were recorded lack them). */
  started_at?: string | null;
  worker?: string | null;
  /**
   * The attempt was given back (not counted): a rescued job that never started
   * (`unstarted` too) or whose worker left it while another session held its row,
   * or a job handed back after Postgres restarted under its running handler.
   */
  refunded?: boolean;
  /** A rescued job whose handler never started. */
  unstarted?: boolean;
}

/** What a handler receives besides the payload. */
export interface JobContext<P = unknown> {
  /** The job row as claimed (status 'processing'). */
  job: JobRow<P>;
  /** 1 on the first run, 2 on the first retry, ... */
  attempt: number;
  /**
   * Fires when the worker wants the handler to stop: the task's timeout passed,
   * the worker is shutting down past its grace period, or the job's lock was lost.
   * Pass it to fetch(), database calls, child processes.
   */
  signal: AbortSignal;
  /**
   * Reports progress (a number such as a percentage, or any JSON object). Stored on
   * the job as `progress`; writes are batched and rate-limited (the newest value
   * wins), so calling it often is cheap. Throws ValidationError if not JSON.
   */
  progress(value: unknown): void;
}

/**
 * A task handler: resolve to complete the job (a JSON value it resolves to is stored
 * as the job's `result`), throw to fail this attempt.
 */
export type TaskHandler<P = any> = (payload: P, ctx: JobContext<P>) => unknown | Promise<unknown>;

/** Per-task settings, for tasks that need more than a bare function. */
export interface TaskDefinition<P = any> {
  handler: TaskHandler<P>;
  /** Abort the handler and fail the attempt after this many ms. Default: none. */
  timeoutMs?: number | undefined;
  /**
   * Attempts before a job of this task is marked failed, overriding the job's own
   * max_attempts (set at enqueue) for failures its handler reports. 1–1000.
   */
  maxAttempts?: number | undefined;
  /** Retry delays for this task (shape, base, cap), overriding the worker's `backoff`. */
  backoff?: BackoffOptions | undefined;
}

/**
 * Task name → payload type, for `Queue<T>` and `Worker<T>` to check task names
 * and payloads at compile time. `AnyTasks` (the default) accepts any.
 *
 * @example
 *   interface Tasks { send_welcome: { userId: number }; nightly_report: { day: string } }
 *   const queue = new Queue<Tasks>({ connectionString });
 *   await queue.enqueue('send_welcome', { userId: 1 }); // a typo or a wrong payload does not compile
 */
// `object`, not Record<string, unknown>: an interface has no index signature and must fit too.
export type TaskMap = object;
export type AnyTasks = Record<string, any>;

/** Handlers by task name; for a typed map, each handler receives its task's payload type. */
export type TaskList<T extends TaskMap = AnyTasks> = { [K in keyof T]?: TaskHandler<T[K]> | TaskDefinition<T[K]> };
