import type { CompletionWrite, FailureWrite } from '../db/worker-store.js';
import { ValidationError } from '../errors.js';
import type { JobRow } from '../job.js';
import { retryDelayMs, type BackoffOptions } from './backoff.js';
import type { ResolvedTask } from './task-options.js';
import { describeError, type Run } from './run.js';

// The outcomes waiting in the Completer to be written, and what becomes of one
// Postgres refuses to store.

/** How long an outcome Postgres refuses is tried again before it is given up (see expired()). */
const REFUSED_GIVE_UP_MS = 30_000;

/** Where an outcome Postgres refused stands (Completer.rejected). */
interface Refusal {
  /** When Postgres first refused this outcome sent alone. */
  firstRefusedAt?: number;
  /** Held after a refusal: goes back to be sent alone, not in a batch. */
  held?: boolean;
}

/** Whether an outcome may already be written. */
interface Sent {
  /** Sent in a statement that failed (its reply maybe lost after it committed). */
  unsure?: boolean;
  /** Skipped once already because another session held its row (Completer.skipped). */
  skippedBefore?: boolean;
}

export interface Completion extends CompletionWrite, Refusal, Sent {
  job: JobRow;
  /** The task's policy, should this outcome have to become a failure (failureInPlaceOf()). */
  task: ResolvedTask;
  refused?: undefined;
  durationMs: number;
}

export interface Failure extends FailureWrite, Refusal, Sent {
  job: JobRow;
  /** Written in place of an outcome Postgres refused (failureInPlaceOf()). */
  refused?: boolean;
  /** What was thrown, for events. */
  error: unknown;
  durationMs: number;
}

/** An outcome waiting to be written. */
export type Recorded = Completion | Failure;

export function isFailure(outcome: Recorded): outcome is Failure {
  return 'final' in outcome;
}

/** An outcome refused for longer than REFUSED_GIVE_UP_MS: given up when refused alone again. */
export function expired(outcome: Recorded): boolean {
  return outcome.firstRefusedAt !== undefined && Date.now() - outcome.firstRefusedAt >= REFUSED_GIVE_UP_MS;
}

/** A run's failure, retried as its task's policy (else the job's max_attempts and the worker's backoff) says. */
export function failureOf(
  run: Run,
  error: unknown,
  { permanent, durationMs, progress }: { permanent: boolean; durationMs: number; progress: string | undefined },
  backoff: Required<BackoffOptions>,
): Failure {
  const { job, task, attempt } = run;
  return {
    id: job.id,
    attempt,
    errorText: describeError(error),
    delayMs: retryDelayMs(attempt, task.backoff ?? backoff),
    final: permanent || attempt >= (task.maxAttempts ?? job.max_attempts),
    startedAt: localStart(run),
    progress,
    job,
    error,
    durationMs,
  };
}

/**
 * The failure written in place of an outcome Postgres kept refusing: a failure of
 * its attempt without the values refused (result, progress, the handler's error
 * text), retried as the job's policy says. A refusal that passes (a trigger being
 * replaced) then costs a rerun, not the job.
 */
export function failureInPlaceOf(outcome: Recorded, err: unknown, backoff: Required<BackoffOptions>): Failure {
  const refusal = `its ${isFailure(outcome) ? 'error' : 'result'} or progress could not be stored: ${describeRefusal(err)}`;
  const retry = isFailure(outcome)
    ? { final: outcome.final, delayMs: outcome.delayMs }
    : {
        final: outcome.attempt >= (outcome.task.maxAttempts ?? outcome.job.max_attempts),
        delayMs: retryDelayMs(outcome.attempt, outcome.task.backoff ?? backoff),
      };
  return {
    id: outcome.id,
    attempt: outcome.attempt,
    errorText: `Error: ${refusal}`,
    ...retry,
    startedAt: outcome.startedAt,
    progress: undefined,
    job: outcome.job,
    error: new ValidationError(`job ${outcome.id}: ${refusal}`, { cause: err }),
    durationMs: outcome.durationMs,
    refused: true,
  };
}

/** Postgres' message for a refused write, without the driver's wrapping. */
export function describeRefusal(err: unknown): string {
  const sqlState = (err as { code?: unknown } | null)?.code;
  const message = err instanceof Error ? err.message : String(err);
  return typeof sqlState === 'string' ? `${message} (SQLSTATE ${sqlState})` : message;
}

/** The start of a run the claim did not start (claimed ahead), for the row: see CompletionWrite.startedAt. */
export function localStart(run: Run): number | undefined {
  return run.claimedAhead ? run.startedAtMs : undefined;
}
