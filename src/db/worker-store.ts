import type { JobRow } from '../job.js';

// What the worker's parts need from the database, as an interface: PgWorkerStore (store.ts)
// implements it over a Driver, and the fast tests over memory.

/** A finished run, as the cycle statement writes it. */
export interface CompletionWrite {
  id: string;
  attempt: number;
  /** What the handler returned, as JSON text, or null. */
  result: string | null;
  /**
   * When the run started (ms since epoch), for a job claimed ahead: its row's
   * started_at is written from this if the start mark has not gone out yet.
   */
  startedAt?: number;
  /** The run's newest ctx.progress() report (JSON text), written with the completion. */
  progress?: string;
}

/** A failed run, as the cycle statement writes it. */
export interface FailureWrite {
  id: string;
  attempt: number;
  /** Stored in last_error and the error history. */
  errorText: string;
  /** Retry after this long (ignored when final). */
  delayMs: number;
  /** No more attempts: the job becomes 'failed'. */
  final: boolean;
  /** As CompletionWrite.startedAt: for the row (a final failure) and the error history. */
  startedAt?: number;
  /** As CompletionWrite.progress. */
  progress?: string;
}

export interface CycleRequest {
  completed: readonly CompletionWrite[];
  failed: readonly FailureWrite[];
  /** Queues the common claim takes from (empty: claim nothing). */
  queues: readonly string[];
  /** Tasks this worker has handlers for. */
  tasks: readonly string[];
  /** Most jobs to claim (0: write only). */
  limit: number;
  /** Of the jobs claimed, this many go into free slots at once; the rest are claimed ahead. */
  startNow: number;
  /** Jobs claimed ahead that have started since: their started_at is written. */
  started: readonly string[];
  /** When each of `started` started (ms since epoch); the statement's now() where missing. */
  startedAt?: readonly number[];
}

export interface CycleResult {
  /** Ids whose result was written; the others were no longer this worker's. */
  completed: ReadonlySet<string>;
  failed: ReadonlySet<string>;
  /** Results not written because another session held the row locked: still this worker's, try again. */
  skipped: ReadonlySet<string>;
  claimed: JobRow[];
}

/** What a statement that skips rows locked by other sessions did with each id. */
export interface LockedWrite {
  /** Written. */
  done: Set<string>;
  /** Still this worker's, but another session held the row: not written, try again. */
  skipped: Set<string>;
}

/** What a heartbeat found: the renewed and the skipped, and the jobs cancelled meanwhile. */
export interface HeartbeatAnswer extends LockedWrite {
  cancelled: Set<string>;
}

/** A queue's row, for the claim plan: only queues that are paused or limited have one that matters. */
export interface QueueStateRow {
  name: string;
  paused: boolean;
  concurrency_limit: number | null;
  /** Has groups or a rate limit (migration 0016): claimed like a limited queue. */
  grouped: boolean;
  /** A limit counts every claimed job: nothing is claimed ahead, each freed slot is refilled at once. */
  strict: boolean;
  /** The queue's own limits (not only some groups'): claim_queue() claims nothing ahead in it at all. */
  no_ahead?: boolean;
}

/** What a claim of one limited, grouped or rate-limited queue got. */
export interface LimitedClaim {
  jobs: JobRow[];
  /** A rate limit held jobs back, or the queue was busy: claim again at this time (ms since epoch). */
  retryAt: number | null;
}

/**
 * Everything the worker runtime asks of the database, as typed operations. This
 * is the only module that knows the statements' parameter order; the runtime's
 * decisions are tested against an in-memory implementation of the same interface
 * (tests/helpers/memory-store.ts).
 */
/** A snooze's new run_at; 'skipped' when another session held the row; undefined when the job is no longer ours. */
export type SnoozeResult = Date | 'skipped' | undefined;

export interface WorkerStore {
  /** One round trip: write results, claim up to `limit` due jobs of `queues`. */
  cycle(request: CycleRequest): Promise<CycleResult>;
  /**
   * Claims from one queue with a concurrency limit (local or global), groups or a rate limit, up to `max`.
   * The first `startNow` (default: all) start now; the rest, where no limit counts them, are claimed ahead.
   * `finished`: jobs whose handlers ended here, results not written yet: not counted as running.
   */
  claimLimited(
    queue: string,
    tasks: readonly string[],
    max: number,
    startNow?: number,
    finished?: readonly string[],
  ): Promise<LimitedClaim>;
  /** Whether any of `queues` has a due pending job of `tasks`, claimable or held back by a limit. */
  hasDueJobs(queues: readonly string[], tasks: readonly string[]): Promise<boolean>;
  /** Renews the locks of `ids` (done); ids in neither set are no longer this worker's. */
  heartbeat(ids: readonly string[], limitMs?: number): Promise<HeartbeatAnswer>;
  /** Back to pending without spending the attempt (done); wakes their queues. */
  release(ids: readonly string[]): Promise<LockedWrite>;
  /**
   * Jobs locked to this worker that are not among `held` (a claim whose reply was
   * lost) back to pending, attempt not spent; wakes their queues. Returns their ids.
   */
  releaseOrphans(held: readonly string[]): Promise<string[]>;
  /** Status and attempt of those of `ids` whose rows this worker holds or finished (locked_by is its id). */
  writtenByMe(ids: readonly string[]): Promise<Map<string, { status: string; attempts: number }>>;
  /**
   * Back to pending at a later time, attempt not spent: the new run_at; 'skipped'
   * when another session held the row; undefined when the job is no longer ours.
   * `note`: a hand-back's entry in the error history (its attempt marked refunded).
   */
  snooze(id: string, attempt: number, runAt: Date | null, delayMs: number, note?: string): Promise<SnoozeResult>;
  /**
   * A job whose handler was aborted because Postgres could not be reached: back to
   * pending, attempt not spent, if the server restarted since its lock was last
   * renewed, with `message`, or, given `unansweredMessage` (its beats went out
   * unanswered), whether or not it did, with that one (its run_at, and whether the
   * server restarted; run_at null when an earlier try of this hand-back did it, its
   * reply lost, and the job is pending or someone else's since); 'charge' when
   * neither holds, 'refunded-before' when the server restarted but the job's
   * previous attempt was given back already (the worker writes the failure);
   * 'skipped' when another session held the row; undefined when the job is no
   * longer ours.
   */
  handBackAfterRestart(id: string, attempt: number, message: string, unansweredMessage?: string | null): Promise<RestartVerdict>;
  /** Writes the latest progress of running jobs; the ids written (not rows another session held, nor jobs no longer this worker's). */
  progress(ids: readonly string[], values: readonly string[]): Promise<Set<string>>;
  /** Rows of the worker's queues that are paused or limited. */
  queueState(queues: readonly string[]): Promise<QueueStateRow[]>;
  /** Flags `queue` grouped and tells the workers, unless it is already; true when this call flagged it. */
  markGrouped(queue: string): Promise<boolean>;
}

/** See WorkerStore.handBackAfterRestart. */
export type RestartVerdict = { runAt: Date | null; restarted: boolean } | 'charge' | 'refunded-before' | 'skipped' | undefined;
