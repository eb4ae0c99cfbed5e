import type { JobRow } from '../job.js';

/** A finished run waiting to be written. */
export interface Completion {
  job: JobRow;
  attempt: number;
  /** What the handler returned, as JSON text (null when it returned nothing). */
  result?: string | null;
  /** Handler run time, for events. */
  durationMs?: number;
}

export interface Failure extends Completion {
  /** What was thrown, for events. */
  error: unknown;
  /** What is stored in last_error. */
  errorText: string;
  delayMs: number;
  /** No more attempts: the handler gave up (PermanentFailure) or the attempts ran out. */
  permanent: boolean;
}

export interface ResultBatch {
  completed: Completion[];
  failed: Failure[];
}

/**
 * Results of finished jobs, held until the next statement writes them in a batch.
 * If the write fails, the batch goes back so it is retried with the next one; the
 * write is guarded by attempt and lock holder, so writing a result twice is harmless.
 */
export class ResultBuffer {
  private completed: Completion[] = [];
  private failed: Failure[] = [];

  get size(): number {
    return this.completed.length + this.failed.length;
  }

  /** Ids of the jobs whose results wait here: their locks must stay fresh until written. */
  ids(): string[] {
    return [...this.completed, ...this.failed].map((r) => r.job.id);
  }

  complete(c: Completion): void {
    this.completed.push(c);
  }

  fail(f: Failure): void {
    this.failed.push(f);
  }

  take(): ResultBatch {
    const batch = { completed: this.completed, failed: this.failed };
    this.completed = [];
    this.failed = [];
    return batch;
  }

  restore(batch: ResultBatch): void {
    this.completed = batch.completed.concat(this.completed);
    this.failed = batch.failed.concat(this.failed);
  }
}

/** The batch as the cycle statement's array parameters ($2..$8). */
export function batchParams(batch: ResultBatch): unknown[] {
  return [
    batch.completed.map((c) => c.job.id),
    batch.completed.map((c) => c.attempt),
    batch.failed.map((f) => f.job.id),
    batch.failed.map((f) => f.attempt),
    batch.failed.map((f) => f.errorText),
    batch.failed.map((f) => f.delayMs),
    batch.failed.map((f) => f.permanent),
  ];
}

/** The handlers' results, parallel to the completed ids ($12 of the cycle statement). */
export function resultsParam(batch: ResultBatch): (string | null)[] {
  return batch.completed.map((c) => c.result ?? null);
}
