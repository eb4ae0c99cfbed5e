import type { JobRow } from '../job.js';
import type {
  CycleRequest,
  CycleResult,
  HeartbeatAnswer,
  LockedWrite,
  QueueStateRow,
  LimitedClaim,
  SnoozeResult,
  WorkerStore,
  RestartVerdict,
} from './worker-store.js';
import type { Driver } from './driver.js';
import { channelFor, doneChannelFor, preparedName } from './identifiers.js';
import { workerStatements, type WorkerStatements } from './statements/worker.js';

/** A claimed job as the cycle and the claim return it (claimedColumns in statements/job-columns.ts). */
type ClaimedRow = Pick<
  JobRow,
  | 'id'
  | 'queue'
  | 'task'
  | 'payload'
  | 'priority'
  | 'run_at'
  | 'attempts'
  | 'max_attempts'
  | 'last_error'
  | 'created_at'
  | 'job_key'
  | 'trace_context'
  | 'group_key'
> & {
  /** The claim started it (a free slot); false: claimed ahead. */
  started: boolean;
  /** The time the claim stamped on its rows (after any lock wait), on the first claimed row only. */
  claimed_at: Date | null;
};

/** A row of the cycle: a claimed job (id null when none was) and, on one row, the ids it wrote. */
type CycleRow = { [K in keyof ClaimedRow]: ClaimedRow[K] | null } & {
  completed_ids: string[] | null;
  failed_ids: string[] | null;
  skipped_ids: string[] | null;
};

function lockedWrite(rows: { id: string; done: boolean }[]): LockedWrite {
  const result: LockedWrite = { done: new Set(), skipped: new Set() };
  for (const row of rows) (row.done ? result.done : result.skipped).add(row.id);
  return result;
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
    /** 'delete': completed jobs' rows are deleted by the cycle (WorkerOptions.completedJobs). */
    private readonly completedJobs: 'keep' | 'delete' = 'keep',
  ) {
    this.queries = workerStatements(schema);
    this.channel = channelFor(schema);
    this.doneChannel = doneChannelFor(schema);
  }

  async cycle(r: CycleRequest): Promise<CycleResult> {
    // One queue to claim from (or none: a write-only cycle) takes the form whose
    // plan walks the dequeue index in order (see the statement's comment).
    const many = r.queues.length > 1;
    if (r.completed.length + r.failed.length + r.started.length === 0 && r.limit > 0) return this.claim(r, many);
    const deleting = this.completedJobs === 'delete';
    const { rows } = await this.db.query<CycleRow>(
      deleting
        ? many
          ? this.queries.cycleManyQueuesDeletingCompleted
          : this.queries.cycleDeletingCompleted
        : many
          ? this.queries.cycleManyQueues
          : this.queries.cycle,
      [
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
        r.started,
        r.startNow,
        r.completed.map((c) => c.startedAt ?? null),
        r.failed.map((f) => f.startedAt ?? null),
        r.completed.map((c) => c.progress ?? null),
        r.failed.map((f) => f.progress ?? null),
        r.startedAt ?? r.started.map(() => null),
      ],
      this.name(`${many ? 'cycle-many' : 'cycle'}${deleting ? '-deleting' : ''}`),
    );
    return cycleResult(rows, this.workerId);
  }

  /** A cycle with nothing to write: the claim alone, a cheaper statement (see claimStatement). */
  private async claim(r: CycleRequest, many: boolean): Promise<CycleResult> {
    const { rows } = await this.db.query<ClaimedRow & { claim_order: number }>(
      many ? this.queries.claimManyQueues : this.queries.claim,
      [this.workerId, r.queues, r.tasks, r.limit, r.startNow],
      this.name(many ? 'claim-many' : 'claim'),
    );
    // In the join's order: back into claim order (see claimStatement).
    if (rows.length > 1) rows.sort((a, b) => a.claim_order - b.claim_order);
    return { completed: new Set(), failed: new Set(), skipped: new Set(), claimed: claimedJobs(rows, this.workerId) };
  }

  async claimLimited(
    queue: string,
    tasks: readonly string[],
    max: number,
    startNow = max,
    finished: readonly string[] = [],
  ): Promise<LimitedClaim> {
    const { rows } = await this.db.query<JobRow & { id: string | null; wait_until: Date | null }>(
      this.queries.claimLimited,
      [this.workerId, queue, tasks, max, startNow, finished],
      this.name('claim-limited'),
    );
    const claim: LimitedClaim = { jobs: [], retryAt: null };
    for (const { wait_until: waitUntil, ...job } of rows) {
      if (job.id !== null) claim.jobs.push(job as JobRow);
      else if (waitUntil) claim.retryAt = waitUntil.getTime();
    }
    return claim;
  }

  async hasDueJobs(queues: readonly string[], tasks: readonly string[]): Promise<boolean> {
    const { rows } = await this.db.query<{ due: boolean }>(this.queries.hasDueJobs, [queues, tasks], this.name('has-due-jobs'));
    return rows[0]!.due;
  }

  async heartbeat(ids: readonly string[], limitMs?: number): Promise<HeartbeatAnswer> {
    const { rows } = await this.db.query<{ id: string; renewed: boolean | null }>(
      this.queries.heartbeat,
      [this.workerId, ids],
      this.name('heartbeat'),
      limitMs,
    );
    const cancelled = new Set(rows.filter((r) => r.renewed === null).map((r) => r.id));
    return { ...lockedWrite(rows.filter((r) => r.renewed !== null).map((r) => ({ id: r.id, done: r.renewed! }))), cancelled };
  }

  async release(ids: readonly string[]): Promise<LockedWrite> {
    if (ids.length === 0) return { done: new Set(), skipped: new Set() };
    const { rows } = await this.db.query<{ id: string; queue: string; released: boolean }>(this.queries.release, [
      this.workerId,
      ids,
    ]);
    await this.wake(rows.filter((r) => r.released));
    return lockedWrite(rows.map((r) => ({ id: r.id, done: r.released })));
  }

  async releaseOrphans(held: readonly string[]): Promise<string[]> {
    const { rows } = await this.db.query<{ id: string; queue: string }>(this.queries.releaseOrphans, [this.workerId, held]);
    await this.wake(rows);
    return rows.map((r) => r.id);
  }

  async writtenByMe(ids: readonly string[]): Promise<Map<string, { status: string; attempts: number }>> {
    const { rows } = await this.db.query<{ id: string; status: string; attempts: number }>(this.queries.writtenByMe, [
      this.workerId,
      ids,
    ]);
    return new Map(rows.map((r) => [r.id, { status: r.status, attempts: r.attempts }]));
  }

  /** Wakes the workers of the queues of jobs just made pending again. */
  private async wake(rows: readonly { queue: string }[]): Promise<void> {
    const queues = [...new Set(rows.map((r) => r.queue))];
    if (queues.length > 0) await this.db.query(this.queries.notify, [this.channel, queues]);
  }

  async snooze(id: string, attempt: number, runAt: Date | null, delayMs: number, note?: string): Promise<SnoozeResult> {
    const { rows } = await this.db.query<{ run_at: Date | null; mine: boolean }>(this.queries.snooze, [
      this.workerId,
      id,
      attempt,
      runAt,
      delayMs,
      note ?? null,
    ]);
    const row = rows[0];
    if (row?.run_at) return row.run_at;
    return row?.mine ? 'skipped' : undefined;
  }

  async handBackAfterRestart(
    id: string,
    attempt: number,
    message: string,
    unansweredMessage: string | null = null,
  ): Promise<RestartVerdict> {
    const { rows } = await this.db.query<{
      run_at: Date | null;
      charge: boolean;
      restarted: boolean;
      mine: boolean;
      handed_before: 'restart' | 'unanswered' | null;
    }>(this.queries.handBackAfterRestart, [this.workerId, id, attempt, message, unansweredMessage]);
    const row = rows[0];
    if (row?.run_at) return { runAt: row.run_at, restarted: row.restarted };
    // Handed back by an earlier try whose reply was lost: done, and pending (or taken) since.
    if (row?.handed_before) return { runAt: null, restarted: row.handed_before === 'restart' };
    // Not refunded though the server restarted, or the beats went unanswered: the refund was used already.
    if (row?.charge) return row.restarted || unansweredMessage !== null ? 'refunded-before' : 'charge';
    return row?.mine ? 'skipped' : undefined;
  }

  /** Writes the reports; the ids written (not those whose rows another session held, or no longer this worker's). */
  async progress(ids: readonly string[], values: readonly string[]): Promise<Set<string>> {
    const { rows } = await this.db.query<{ id: string }>(this.queries.progress, [this.workerId, ids, values]);
    return new Set(rows.map((r) => r.id));
  }

  async queueState(queues: readonly string[]): Promise<QueueStateRow[]> {
    const { rows } = await this.db.query<QueueStateRow>(this.queries.queueState, [queues]);
    return rows;
  }

  async markGrouped(queue: string): Promise<boolean> {
    const { rows } = await this.db.query<{ flagged: boolean }>(this.queries.markGrouped, [queue, this.channel]);
    return rows[0]?.flagged ?? false;
  }

  /** A named prepared statement per schema, unless prepared statements are off. */
  private name(statement: string): string | undefined {
    return this.prepared ? preparedName(statement, this.queries.schema) : undefined;
  }
}

/** What a cycle's (or a claim's) rows say: the id sets ride on one row, every other column is a claimed job. */
function cycleResult(rows: CycleRow[], workerId: string): CycleResult {
  const first = rows.find((r) => r.completed_ids !== null);
  return {
    completed: new Set(first?.completed_ids ?? []),
    failed: new Set(first?.failed_ids ?? []),
    skipped: new Set(first?.skipped_ids ?? []),
    // A cycle that claimed nothing still has its one row, with no job on it.
    claimed: claimedJobs(rows.filter((row) => row.id !== null) as ClaimedRow[], workerId),
  };
}

/** The claimed jobs of a cycle's or a claim's rows; the claim's time rides on one of them. */
function claimedJobs(rows: readonly ClaimedRow[], workerId: string): JobRow[] {
  const claimedAt = rows.find((r) => r.claimed_at !== null)?.claimed_at?.getTime() ?? Date.now();
  return rows.map((row) => claimedJob(row, claimedAt, workerId));
}

/** The job row of a claimed job: what the claim wrote and did not send back is filled in. */
function claimedJob(row: ClaimedRow, claimedAt: number, workerId: string): JobRow {
  return {
    id: row.id,
    queue: row.queue,
    task: row.task,
    payload: row.payload,
    status: 'processing',
    priority: row.priority,
    run_at: row.run_at,
    attempts: row.attempts,
    max_attempts: row.max_attempts,
    locked_at: new Date(claimedAt),
    locked_by: workerId,
    last_error: row.last_error,
    created_at: row.created_at,
    updated_at: new Date(claimedAt),
    finished_at: null,
    started_at: row.started ? new Date(claimedAt) : null,
    trace_context: row.trace_context,
    job_key: row.job_key,
    group_key: row.group_key,
  };
}
