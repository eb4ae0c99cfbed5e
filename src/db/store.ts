import type { JobRow } from '../job.js';
import type { Driver } from './driver.js';
import { channelFor, doneChannelFor } from './identifiers.js';
import { workerStatements, type WorkerStatements } from './statements/worker.js';

/** A finished run, as the cycle statement writes it. */
export interface CompletionWrite {
  id: string;
  attempt: number;
  /** What the handler returned, as JSON text, or null. */
  result: string | null;
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
}

export interface CycleResult {
  /** Ids whose result was written; the others were no longer this worker's. */
  completed: ReadonlySet<string>;
  failed: ReadonlySet<string>;
  claimed: JobRow[];
}

/** A queue's row, for the claim plan: only queues that are paused or limited have one that matters. */
export interface QueueStateRow {
  name: string;
  paused: boolean;
  concurrency_limit: number | null;
}

/**
 * Everything the worker runtime asks of the database, as typed operations. This
 * is the only module that knows the statements' parameter order; the runtime's
 * decisions are tested against an in-memory implementation of the same interface
 * (tests/helpers/memory-store.ts).
 */
export interface WorkerStore {
  /** One round trip: write results, claim up to `limit` due jobs of `queues`. */
  cycle(request: CycleRequest): Promise<CycleResult>;
  /** Claims from one queue with a concurrency limit (local or global), up to `max`. */
  claimLimited(queue: string, tasks: readonly string[], max: number): Promise<JobRow[]>;
  /** Renews the locks of `ids`; returns the ids still held by this worker. */
  heartbeat(ids: readonly string[]): Promise<Set<string>>;
  /** Back to pending without spending the attempt; wakes their queues. Returns the ids released. */
  release(ids: readonly string[]): Promise<string[]>;
  /** Back to pending at a later time, attempt not spent; undefined when the job is no longer ours. */
  snooze(id: string, attempt: number, runAt: Date | null, delayMs: number): Promise<Date | undefined>;
  /** Writes the latest progress of running jobs. */
  progress(ids: readonly string[], values: readonly string[]): Promise<void>;
  /** Rows of the worker's queues that are paused or limited. */
  queueState(queues: readonly string[]): Promise<QueueStateRow[]>;
}

interface CycleRow extends JobRow {
  completed_ids: string[] | null;
  failed_ids: string[] | null;
}

/** The WorkerStore over a Driver: `pg` or postgres.js. */
export class PgWorkerStore implements WorkerStore {
  private readonly queries: WorkerStatements;
  private readonly channel: string;
  private readonly doneChannel: string;

  constructor(
    private readonly db: Driver,
    schema: string,
    private readonly workerId: string,
    /** false: send every statement unnamed (transaction-mode poolers without prepared statements). */
    private readonly prepared: boolean,
  ) {
    this.queries = workerStatements(schema);
    this.channel = channelFor(schema);
    this.doneChannel = doneChannelFor(schema);
  }

  async cycle(r: CycleRequest): Promise<CycleResult> {
    // One queue to claim from (or none: a write-only cycle) takes the form whose
    // plan walks the dequeue index in order (see the statement's comment).
    const many = r.queues.length > 1;
    const { rows } = await this.db.query<CycleRow>(many ? this.queries.cycleManyQueues : this.queries.cycle, [
      this.workerId,
      r.completed.map((c) => c.id),
      r.completed.map((c) => c.attempt),
      r.failed.map((f) => f.id),
      r.failed.map((f) => f.attempt),
      r.failed.map((f) => f.errorText),
      r.failed.map((f) => f.delayMs),
      r.failed.map((f) => f.final),
      r.queues,
      r.tasks,
      r.limit,
      r.completed.map((c) => c.result),
      this.doneChannel,
    ], this.name(many ? 'cycle-many' : 'cycle'));
    const first = rows[0];
    const claimed: JobRow[] = [];
    for (const row of rows) {
      if (row.id === null) continue;
      const { completed_ids: _c, failed_ids: _f, ...job } = row;
      claimed.push(job);
    }
    return { completed: new Set(first?.completed_ids ?? []), failed: new Set(first?.failed_ids ?? []), claimed };
  }

  async claimLimited(queue: string, tasks: readonly string[], max: number): Promise<JobRow[]> {
    const { rows } = await this.db.query<JobRow>(this.queries.claimLimited, [this.workerId, queue, tasks, max],
      this.name('claim-limited'));
    return rows;
  }

  async heartbeat(ids: readonly string[]): Promise<Set<string>> {
    const { rows } = await this.db.query<{ id: string }>(this.queries.heartbeat, [this.workerId, ids], this.name('heartbeat'));
    return new Set(rows.map((r) => r.id));
  }

  async release(ids: readonly string[]): Promise<string[]> {
    if (ids.length === 0) return [];
    const { rows } = await this.db.query<{ id: string; queue: string }>(this.queries.release, [this.workerId, ids]);
    const queues = [...new Set(rows.map((r) => r.queue))];
    if (queues.length > 0) await this.db.query(this.queries.notify, [this.channel, queues]);
    return rows.map((r) => r.id);
  }

  async snooze(id: string, attempt: number, runAt: Date | null, delayMs: number): Promise<Date | undefined> {
    const { rows } = await this.db.query<{ run_at: Date }>(this.queries.snooze, [this.workerId, id, attempt, runAt, delayMs]);
    return rows[0]?.run_at;
  }

  async progress(ids: readonly string[], values: readonly string[]): Promise<void> {
    await this.db.query(this.queries.progress, [this.workerId, ids, values]);
  }

  async queueState(queues: readonly string[]): Promise<QueueStateRow[]> {
    const { rows } = await this.db.query<QueueStateRow>(this.queries.queueState, [queues]);
    return rows;
  }

  /** A named prepared statement per schema, unless prepared statements are off. */
  private name(statement: string): string | undefined {
    return this.prepared ? `sluice-${statement}-${this.queries.schema}` : undefined;
  }
}
