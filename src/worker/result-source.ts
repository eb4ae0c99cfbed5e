import type { CompletionWrite, FailureWrite } from '../db/worker-store.js';

// The contract between the fetch loop and the Completer: results wait in the
// Completer until a cycle takes them, and come back with what the database did.

/** Results waiting to be written, taken by the next cycle. */
export interface ResultBatch<C extends CompletionWrite = CompletionWrite, F extends FailureWrite = FailureWrite> {
  completed: C[];
  failed: F[];
  /** Jobs claimed ahead that have started. */
  started: string[];
  /** When each of `started` started (ms since epoch, the worker's clock), for its row. */
  startedAt: number[];
  /**
   * Sent without a claim, and a refusal of this write is its results' own: one
   * result of a batch Postgres refused, sent alone to find the one refused, or
   * the held results (each refused on its own already) tried again together.
   */
  alone?: boolean;
}

/** A batch with no result in it: a cycle that only claims. */
export const NO_RESULTS: ResultBatch = Object.freeze({ completed: [], failed: [], started: [], startedAt: [] });

/** What the database did with a batch. */
export interface AppliedResults {
  completed: ReadonlySet<string>;
  failed: ReadonlySet<string>;
  /** Not written because another session held the row locked: still this worker's. */
  skipped: ReadonlySet<string>;
}

/** Where the results come from and go back to: the Completer. */
export interface ResultSource {
  /** Results waiting to go out with the next cycle. */
  readonly size: number;
  /** Results not written yet: waiting, or held back for a moment (their row was locked). */
  readonly unwritten: number;
  take(): ResultBatch;
  /** A cycle failed: the batch goes back, to be written with the next one. */
  restore(batch: ResultBatch): void;
  /**
   * Postgres refused the values of the batch's write (isDataRejection): the batch
   * goes back, and its results go out one at a time until the one refused is
   * found and written as a failure of its job alone. False when the refusal is
   * not news: an outcome already held being refused again (tried every 250 ms, it
   * would otherwise raise an error event each time) or one reported on its own.
   */
  rejected(batch: ResultBatch, err: unknown): boolean;
  /**
   * The batch was written; ids missing from every set were no longer this worker's.
   * `othersBack`: resolves once the other cycles that were out meanwhile are back
   * (their claims may have held rows this write skipped).
   */
  applied(batch: ResultBatch, written: AppliedResults, othersBack?: Promise<void>): void;
}

/**
 * The jobs of `batch` that are done for good: completed, or failed with no attempt
 * left. A job going back to pending for a retry is left out: once the write
 * commits, the claim beside it may take the job again, and must then count it as
 * running (outside review, 2026-12-01: a group limit of 1 exceeded with 1 ms retries).
 */
export function doneForGood(batch: ResultBatch): string[] {
  return [...batch.completed.map((c) => c.id), ...batch.failed.filter((f) => f.final).map((f) => f.id)];
}
