/** Where a job is in its life: pending → processing → completed | failed (or cancelled). */
export type JobStatus = 'pending' | 'processing' | 'completed' | 'failed' | 'cancelled';

/** A row of the jobs table as Sluice reads it. Ids are strings: bigint does not fit a JS number. */
export interface JobRow<P = unknown> {
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
}

/** A task handler: resolve to complete the job, throw to fail this attempt. */
export type TaskHandler<P = any> = (payload: P, ctx: JobContext<P>) => unknown | Promise<unknown>;

/** Per-task settings, for tasks that need more than a bare function. */
export interface TaskDefinition<P = any> {
  handler: TaskHandler<P>;
  /** Abort the handler and fail the attempt after this many ms. Default: none. */
  timeoutMs?: number;
}

export type TaskList = Record<string, TaskHandler | TaskDefinition>;
