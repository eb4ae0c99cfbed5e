import type { ResolvedWorkerConfig } from './options.js';
import type { Driver } from '../db/driver.js';
import type { WorkerStatements } from '../db/statements/worker.js';
import type { JobRow } from '../job.js';
import { doneChannelFor } from '../db/identifiers.js';
import type { ClaimPlan } from './queue-state.js';
import { batchParams, resultsParam, type ResultBatch, type ResultBuffer } from './results.js';

export interface ProducerHooks {
  /** Jobs the worker may hold now: concurrency plus the prefetch in effect. */
  capacity(): number;
  /** Room left: capacity minus the jobs held (running or waiting). */
  freeSlots(): number;
  /** Slots free for one queue, after its local limit (if any). */
  freeSlotsIn(queue: string): number;
  /** Which queues the cycle claims from, and which go through claimLimited. */
  claimPlan(): ClaimPlan;
  /** Jobs this cycle claimed; the worker starts them. */
  claimed(jobs: JobRow[]): void;
  /** Results written; ids missing from the sets were rejected (the lock was lost). */
  applied(batch: ResultBatch, completed: Set<string>, failed: Set<string>): void;
  error(err: unknown): void;
}

interface CycleRow extends JobRow {
  completed_ids: string[] | null;
  failed_ids: string[] | null;
}

const RETRY_MIN_MS = 50;
const RETRY_MAX_MS = 5_000;

/**
 * The worker's fetch loop. Each cycle is one statement that writes buffered
 * results and claims up to the free slots, so a busy worker spends one round trip
 * per batch of jobs, not several per job. Cycles never overlap; requests that
 * arrive during one are folded into the next.
 *
 * It claims only when there may be work: after a notification, a poll tick, a
 * delayed job falling due, or a claim that came back full. A claim that comes back
 * short means the backlog is empty, so the worker stops asking until woken. That
 * is what keeps idle workers from hammering Postgres with empty claims.
 */
/** Counters of the fetch loop, for benchmarks and monitoring. */
export interface ProducerStats {
  /** Statements sent (each writes results and/or claims). */
  cycles: number;
  /** Cycles that asked for jobs. */
  claims: number;
  /** Cycles that asked for jobs and got none: the cost of a wake-up with nothing to do. */
  emptyClaims: number;
  /** Jobs claimed. */
  claimed: number;
}

export class Producer {
  readonly stats: ProducerStats = { cycles: 0, claims: 0, emptyClaims: 0, claimed: 0 };
  private mayHaveWork = true;
  /** Bumped by every wake-up, so a cycle that was already running cannot cancel it. */
  private wakeups = 0;
  private inFlight = false;
  private again = false;
  private scheduled = false;
  private stopping = false;
  private failures = 0;
  private flushTimer: NodeJS.Timeout | undefined;
  private pollTimer: NodeJS.Timeout | undefined;
  private dueTimer: NodeJS.Timeout | undefined;
  private dueAt = Infinity;
  private retryTimer: NodeJS.Timeout | undefined;
  private forceFlush = false;
  private draining = false;
  private idle: (() => void)[] = [];
  /** The cycle as named statements, for one queue and for several (see queries.ts). */
  private readonly statements: { one: { name: string; text: string }; many: { name: string; text: string } };

  constructor(
    private readonly db: Driver,
    private readonly queries: WorkerStatements,
    private readonly config: ResolvedWorkerConfig,
    private readonly buffer: ResultBuffer,
    private readonly hooks: ProducerHooks,
  ) {
    this.statements = {
      one: { name: `sluice-cycle-${queries.schema}`, text: queries.cycle },
      many: { name: `sluice-cycle-many-${queries.schema}`, text: queries.cycleManyQueues },
    };
  }

  start(): void {
    this.stopping = false;
    this.schedulePoll();
    this.wake();
  }

  /** Something may be due now (notification, poll, rescue, reconnect). */
  wake(): void {
    this.mayHaveWork = true;
    this.wakeups++;
    this.kick();
  }

  /** A job becomes due at `at` (ms since epoch): wake then. */
  wakeAt(at: number): void {
    const delay = at - Date.now();
    if (delay <= 0) return this.wake();
    if (at >= this.dueAt) return;
    clearTimeout(this.dueTimer);
    this.dueAt = at;
    this.dueTimer = setTimeout(() => {
      this.dueAt = Infinity;
      this.wake();
    }, delay + 1);
    this.dueTimer.unref();
  }

  /** A job finished and its result is buffered. */
  resultAdded(): void {
    const wantClaim = this.mayHaveWork && !this.stopping && this.hooks.freeSlots() >= this.threshold();
    if (wantClaim || this.buffer.size >= this.config.batchSize) {
      this.kick();
    } else {
      this.armFlushTimer();
    }
  }

  /** Stop claiming and timers; results still get written by drain(). */
  stop(): void {
    this.stopping = true;
    clearTimeout(this.pollTimer);
    clearTimeout(this.dueTimer);
    this.dueAt = Infinity;
  }

  /** Writes every buffered result (retrying while the database is unreachable, up to `deadline`). */
  async drain(deadline: number): Promise<void> {
    this.draining = true;
    clearTimeout(this.flushTimer);
    this.flushTimer = undefined;
    while (this.inFlight) await new Promise<void>((resolve) => this.idle.push(resolve));
    clearTimeout(this.retryTimer);
    while (this.buffer.size > 0) {
      const ok = await this.cycle(0);
      if (!ok) {
        if (Date.now() > deadline) return;
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    }
  }

  private kick(flush = false): void {
    if (flush) this.forceFlush = true;
    if (this.inFlight) {
      this.again = true;
      return;
    }
    if (this.scheduled) return;
    this.scheduled = true;
    // Jobs that finish in the same turn of the event loop share one statement.
    setImmediate(() => {
      this.scheduled = false;
      void this.step();
    });
  }

  private async step(): Promise<void> {
    if (this.inFlight || this.retryTimer || this.draining) return;
    const free = this.hooks.freeSlots();
    const canClaim = this.mayHaveWork && !this.stopping && free > 0;
    const claimNow = canClaim && free >= this.threshold();
    const flushNow = this.buffer.size > 0 && (this.forceFlush || this.buffer.size >= this.config.batchSize);
    if (!claimNow && !flushNow) {
      if (this.buffer.size > 0) this.armFlushTimer();
      return;
    }
    this.forceFlush = false;
    clearTimeout(this.flushTimer);
    this.flushTimer = undefined;
    // A write that goes out anyway takes a claim along for free, even below the threshold.
    await this.cycle(canClaim ? Math.min(free, this.config.batchSize) : 0);
    if (this.again || (this.mayHaveWork && !this.stopping && this.hooks.freeSlots() >= this.threshold())) {
      this.again = false;
      this.kick();
    } else if (this.buffer.size > 0) {
      this.armFlushTimer();
    }
  }

  private armFlushTimer(): void {
    if (this.flushTimer) return;
    this.flushTimer = setTimeout(() => {
      this.flushTimer = undefined;
      this.kick(true);
    }, this.config.completionFlushMs);
  }

  /** One statement: write results, claim up to `limit`. Returns false when it failed. */
  private async cycle(limit: number): Promise<boolean> {
    this.inFlight = true;
    const wakeupsBefore = this.wakeups;
    const batch = this.buffer.take();
    const plan = this.hooks.claimPlan();
    // With limited queues configured, keep a slot per limited queue (up to half)
    // out of the common claim, so a backlog in unlimited queues cannot starve them.
    const plainLimit = limit - Math.min(plan.limited.length, Math.floor(limit / 2));
    try {
      // One queue to claim from (or none: a write-only cycle) takes the form whose
      // plan walks the dequeue index in order.
      const statement = this.cycleStatement(plan.plain.length <= 1 ? 'one' : 'many');
      const { rows } = await this.db.query<CycleRow>(statement.text, [
        this.config.workerId,
        ...batchParams(batch),
        plan.plain,
        [...this.config.tasks.keys()],
        plainLimit,
        // Added by migration 0002, after the claim's parameters so those keep their numbers.
        resultsParam(batch),
        doneChannelFor(this.queries.schema),
      ], statement.name);
      this.failures = 0;
      const first = rows[0];
      if (batch.completed.length + batch.failed.length > 0) {
        this.hooks.applied(batch, new Set(first?.completed_ids ?? []), new Set(first?.failed_ids ?? []));
      }
      const claimed = rows.filter((r) => r.id !== null);
      this.count(limit, claimed.length);
      // A short claim means the backlog is empty, unless a wake-up arrived meanwhile.
      if (limit > 0) this.mayHaveWork = claimed.length >= plainLimit || this.wakeups !== wakeupsBefore;
      if (claimed.length > 0) {
        for (const row of claimed) {
          delete (row as Partial<CycleRow>).completed_ids;
          delete (row as Partial<CycleRow>).failed_ids;
        }
        this.hooks.claimed(claimed);
      }
      // Queues with a concurrency limit take their own statements, only when any
      // are configured. They run after the results above were written, so a slot
      // freed by a finished job is seen by the limit count.
      if (limit > 0 && plan.limited.length > 0 && (await this.claimLimited(plan.limited))) this.mayHaveWork = true;
      return true;
    } catch (err) {
      this.buffer.restore(batch);
      // The claim may have committed with its reply lost: those jobs stay locked to
      // this worker until the rescuer frees them. Nothing is lost, only delayed.
      this.mayHaveWork = true;
      this.hooks.error(err);
      if (!this.stopping) this.scheduleRetry();
      return false;
    } finally {
      this.inFlight = false;
      for (const resolve of this.idle.splice(0)) resolve();
    }
  }

  /**
   * Claims from each limited queue up to its free local slots (the global limit is
   * applied by claim_limited() in the database). Returns true when some queue
   * filled every slot it asked for, i.e. it may have more. Errors are reported and
   * leave the queues to the next cycle; they must not undo the cycle's writes.
   */
  private async claimLimited(queues: string[]): Promise<boolean> {
    let more = false;
    for (const queue of queues) {
      const max = Math.min(this.hooks.freeSlotsIn(queue), this.config.batchSize);
      if (max <= 0) continue;
      try {
        const { rows } = await this.db.query<JobRow>(this.queries.claimLimited,
          [this.config.workerId, queue, [...this.config.tasks.keys()], max], `sluice-claim-limited-${this.queries.schema}`);
        if (rows.length >= max) more = true;
        if (rows.length > 0) this.hooks.claimed(rows);
      } catch (err) {
        // Not "more": a persistent error would spin. The next poll tries again.
        this.hooks.error(err);
      }
    }
    return more;
  }

  /** The cycle statement, named (prepared) unless preparedStatements is off. */
  private cycleStatement(form: 'one' | 'many'): { name: string | undefined; text: string } {
    const { name, text } = this.statements[form];
    return { name: this.config.preparedStatements ? name : undefined, text };
  }

  private count(limit: number, claimed: number): void {
    this.stats.cycles++;
    if (limit === 0) return;
    this.stats.claims++;
    this.stats.claimed += claimed;
    if (claimed === 0) this.stats.emptyClaims++;
  }

  /**
   * Claim only when this many slots are free, unless a write goes out anyway:
   * claiming a few jobs at a time would cost a round trip per few jobs. A quarter
   * of the capacity (slots plus active prefetch), at most a quarter of a batch.
   */
  private threshold(): number {
    return Math.max(1, Math.floor(Math.min(this.hooks.capacity(), this.config.batchSize) / 4));
  }

  private scheduleRetry(): void {
    const delay = Math.min(RETRY_MAX_MS, RETRY_MIN_MS * 2 ** this.failures++);
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      this.kick();
    }, delay * (0.5 + Math.random() / 2));
  }

  private schedulePoll(): void {
    const interval = this.config.pollIntervalMs * (0.75 + Math.random() / 2);
    this.pollTimer = setTimeout(() => {
      this.wake();
      if (!this.stopping) this.schedulePoll();
    }, interval);
    this.pollTimer.unref();
  }
}
