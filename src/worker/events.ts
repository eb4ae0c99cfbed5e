import type { EventEmitter } from 'node:events';
import type { SluiceError } from '../errors.js';
import type { JobRow } from '../job.js';
import type { RescuedJob } from '../maintenance/rescuer.js';
import type { PruneResult } from '../maintenance/pruner.js';
import type { CronTick } from '../maintenance/cron.js';
import type { UnknownTask } from '../admin/workers.js';

/**
 * What a worker reports, for logging and metrics. Every job event's first argument
 * is the job row as claimed; a second one carries what the event is about.
 * Events about results fire once the result is written (so a 'job:complete' job
 * is 'completed' in the database). See README, "Events".
 */
export interface WorkerEvents {
  /** A handler started (attempt = job.attempts). */
  'job:start': [JobRow];
  /** The handler reported progress (written to the job, rate-limited). */
  'job:progress': [JobRow, { progress: unknown }];
  /** Completed; `result` is what the handler returned. */
  'job:complete': [JobRow, { result: unknown; durationMs: number }];
  /** An attempt failed. `willRetry` false means the job is now 'failed' for good (a dead letter). */
  'job:fail': [JobRow, { error: unknown; willRetry: boolean; durationMs: number }];
  /** Follows 'job:fail' when the job will run again: when, and which attempt comes next. */
  'job:retry': [JobRow, { error: unknown; runAt: Date; nextAttempt: number }];
  /** The job's lock was taken away; this run's result was dropped. */
  'job:lock-lost': [JobRow];
  /** One claim statement returned these jobs (they start as slots free). */
  'jobs:claimed': [JobRow[]];
  /**
   * Jobs claimed ahead went back to pending, their attempt not spent, for any
   * worker to take: they waited too long for a slot ('overdue'), their queue
   * turned out grouped ('grouped'), it was paused or given a limit since they
   * were claimed ('queue-changed'), the claim's reply came so late that their
   * locks could not be renewed in time ('late-claim'), or the worker is stopping ('stopping'). Or
   * running jobs aborted because another session held their rows past the lock's
   * renewal timeout ('row-held'), because Postgres restarted under them ('restart'),
   * or because Postgres did not answer the heartbeats their worker sent, and the
   * jobs were still its own once it did ('unanswered': a lock on the jobs table).
   */
  'jobs:handed-back': [JobRow[], { reason: HandBackReason }];
  /** The maintenance leader took back a job whose worker stopped heartbeating (one event per job). */
  'job:rescue': [RescuedJob];
  /** The job was cancelled while this worker ran it; its handler's signal was aborted. */
  'job:cancel': [JobRow];
  /** The handler threw Snooze: the job is pending again at `runAt`, its attempt not spent. */
  'job:snooze': [JobRow, { runAt: Date }];
  /** Emitted by the maintenance leader only: jobs whose lock expired went back to pending (or failed). */
  'jobs:rescued': [RescuedJob[]];
  /** This worker became the maintenance leader of its schema. */
  'leader:elected': [];
  /** This worker stopped being the leader (lease lost, or stopping). */
  'leader:lost': [];
  /** The leader moved finished jobs out of the hot table. */
  'jobs:pruned': [PruneResult];
  /** A recurring schedule's ticks were enqueued by this worker. */
  'cron:enqueued': [CronTick[]];
  /**
   * Emitted by the maintenance leader only: due jobs wait whose task no live worker of
   * their queue handles (a misspelt task, a worker not deployed), by queue and task,
   * each told again at most every 10 minutes while it lasts (as the logger's warning).
   */
  'tasks:unhandled': [UnknownTask[]];
  /** A database or connection problem the worker is riding out (it keeps going). */
  error: [SluiceError];
  /**
   * Postgres is reachable again after 'error' events that said it was not (a
   * ConnectionError): the worker's LISTEN connection is back. `downMs`: since the
   * first of those errors.
   */
  reconnected: [{ downMs: number }];
}

/** Something that emits worker events: the Worker, as seen by logging and metrics. */
export type WorkerEmitter = EventEmitter<WorkerEvents>;

/** Why jobs claimed ahead were handed back (see 'jobs:handed-back'). */
export type HandBackReason =
  'overdue' | 'grouped' | 'queue-changed' | 'late-claim' | 'cancelled' | 'stopping' | 'row-held' | 'restart' | 'unanswered';

/** Emits one worker event; the roles get this instead of the whole Worker. */
export type Emit = <K extends keyof WorkerEvents>(event: K, ...args: WorkerEvents[K]) => void;
