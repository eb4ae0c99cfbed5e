import type { CycleResult, WorkerStore } from '../db/worker-store.js';
import { isDataRejection } from '../errors.js';
import { Backoff } from '../lifecycle/backoff.js';
import { Loop } from '../lifecycle/loop.js';
import { OneShotTimer } from '../lifecycle/one-shot-timer.js';
import { CycleStats } from './cycle-stats.js';
import { CyclesInFlight } from './cycles-in-flight.js';
import { DueTimes } from './due-times.js';
import type { ClaimPlan } from './queue-state.js';
import type { ClaimTarget } from './claim-target.js';
import { LimitedClaims } from './limited-claims.js';
import { OrphanSweep } from './orphan-sweep.js';
import { doneForGood, NO_RESULTS, type ResultBatch, type ResultSource } from './result-source.js';
import { WakeCooldown } from './wake-cooldown.js';

/** A claim after a wake goes without the results waiting while they are fewer than this. */
const CLAIM_ALONE_BELOW = 4;

/** The result of a cycle that sent no statement. */
const NOTHING_SENT: CycleResult = { completed: new Set(), failed: new Set(), skipped: new Set(), claimed: [] };

export interface FetchLoopConfig {
  tasks: readonly string[];
  batchSize: number;
  completionFlushMs: number;
  pollIntervalMs: number;
  wakeCooldownMs: number;
  /** Paces the orphan sweep's follow-ups (see OrphanSweep), well within a visibility timeout. */
  heartbeatIntervalMs: number;
}

/**
 * Decides when to send a cycle: the one statement that writes buffered results
 * and claims up to the free slots, so a busy worker spends one round trip per
 * batch of jobs, not several per job. Up to MAX_CYCLES_IN_FLIGHT overlap; a claim
 * counts the jobs the cycles already out asked for as taken, so together they
 * never ask for more than the slots and prefetch allow. Requests that arrive while
 * the cycles are out are folded into the next one.
 *
 * It claims only when there may be work: after a wake (notification, poll tick, a
 * known due time, a rescue), or after a claim that came back full. A claim that
 * comes back short means the backlog is empty, so the loop stops asking until
 * woken: idle workers do not hammer Postgres with empty claims.
 */
export class FetchLoop {
  readonly stats = new CycleStats();
  // A time this worker waited for came: claim even a single free slot for it.
  private readonly due = new DueTimes((timer) => (timer ? this.wakeUnbatched() : this.wake()));
  /** After a failed cycle: capped low, as results and claims wait for the first one that goes through. */
  private readonly retry = new Backoff({ minMs: 50, maxMs: 2_000 });
  private readonly poll: Loop;
  private readonly cooldown: WakeCooldown;
  private readonly limited: LimitedClaims;
  private mayHaveWork = true;
  /**
   * The last claim came back full: a backlog is draining, and claims wait until
   * enough slots are free to batch them. Otherwise a wake claims even one slot.
   */
  private backlog = false;
  /** Bumped by every wake, so a cycle that was already running cannot cancel it. */
  private wakes = 0;
  private readonly inFlight = new CyclesInFlight();
  private again = false;
  private scheduled = false;
  /** True until start(): a wake before it (LISTEN in place while stop() waits for the start) claims nothing. */
  private stopping = true;
  private draining = false;
  private forceFlush = false;
  private readonly orphans: OrphanSweep;
  private readonly flushTimer = new OneShotTimer(() => this.kick(true));
  private readonly retryTimer = new OneShotTimer(() => this.kick());

  constructor(
    private readonly store: WorkerStore,
    private readonly config: FetchLoopConfig,
    private readonly target: ClaimTarget,
    private readonly results: ResultSource,
    private readonly plan: () => ClaimPlan,
    private readonly onError: (err: unknown) => void,
    /** A cycle went through (after failures: the pool reaches Postgres again). */
    private readonly onWritten: () => void = () => {},
  ) {
    this.orphans = new OrphanSweep(store, target, this.stats, () => this.kick(), config.heartbeatIntervalMs);
    // The fallback for missed notifications, and the only wake of workers that do not listen.
    this.poll = new Loop({ pass: () => this.wakeUnbatched(), intervalMs: config.pollIntervalMs, jitter: [0.75, 1.25] });
    this.limited = new LimitedClaims(
      store,
      config,
      target,
      () => ({ jobs: this.inFlight.requested, starts: this.inFlight.startsRequested }),
      (at) => this.wakeAt(at),
      onError,
      () => this.orphans.uncertain(),
    );
    // A notification due now wakes without stirring the limited queues: notified()
    // stirred them already if it named one of them (see LimitedClaims.quiet).
    this.cooldown = new WakeCooldown(
      config.wakeCooldownMs,
      () => this.rouse(),
      (at) => (at <= Date.now() ? this.rouse() : this.wakeAt(at)),
    );
  }

  start(): void {
    this.stopping = false;
    this.poll.start();
    this.wake();
  }

  /**
   * Another part's statement was answered (a heartbeat): a cycle waiting out its
   * backoff after failures goes now. Behind a table lock whose waits ended in
   * statement timeouts, the results buffered meanwhile were written up to the
   * backoff's 2 s after the lock went (outside review 147).
   */
  answered(): void {
    if (!this.retryTimer.armed) return;
    this.retryTimer.clear();
    this.kick();
  }

  /** Something may be due now (notification, poll, rescue, reconnect, a slot of a limited queue). */
  wake(): void {
    this.limited.stir();
    this.rouse();
  }

  /**
   * Limited queues beside plain ones, and their last claims found nothing since the
   * last wake that could concern them: the plain queues are served as if alone
   * (claims batched and taken ahead, no slot kept back).
   */
  get limitedQuiet(): boolean {
    return this.limited.quiet && this.plan().plain.length > 0;
  }

  /** The plain queues are claimed as if the worker served nothing else: no limited queue, or only quiet ones. */
  private plainAlone(plan: ClaimPlan): boolean {
    return plan.limited.length === 0 || this.limitedQuiet;
  }

  /** A slot of the limited queue `queue` opened here: claim, stirring that queue alone. */
  wakeFor(queue: string): void {
    this.limited.stir(queue);
    this.rouse();
  }

  /** A wake that leaves quiet limited queues quiet (a plain queue's notification). */
  private rouse(): void {
    this.mayHaveWork = true;
    this.wakes++;
    this.kick();
  }

  /**
   * A poll tick or a due time: claim even a single free slot, also while a backlog
   * drains (notifications, which arrive with every enqueue, keep batching).
   */
  private wakeUnbatched(): void {
    this.backlog = false;
    this.wake();
  }

  /**
   * A notification said a job is due at `runAt` in `queue` ('': unknown): claim,
   * unless a storm is being damped (WakeCooldown).
   */
  notified(runAt: number, queue = ''): void {
    if (this.stopping) return;
    if (!this.plan().plain.includes(queue)) this.limited.stir(queue === '' ? undefined : queue);
    this.cooldown.notified(runAt);
  }

  /** A job becomes due at `at` (ms since epoch): wake then. Every such time is kept. */
  wakeAt(at: number): void {
    if (!this.stopping) this.due.add(at);
  }

  /** A job finished and its result is waiting to be written. */
  resultAdded(): void {
    if (this.wantClaim() || this.results.size >= this.config.batchSize) this.kick();
    else this.armFlushTimer();
  }

  /** A slot freed with no result to write: claims for it when a claim is wanted now. */
  slotFreed(): void {
    if (this.wantClaim()) this.kick();
  }

  /**
   * Claims nothing more. Resolves once no cycle is in flight, so every job a claim
   * brought back has reached the target and can be handed back by the caller.
   */
  async stopClaiming(): Promise<void> {
    this.stopping = true;
    void this.poll.stop();
    this.due.clear();
    this.orphans.stop();
    this.cooldown.stop();
    await this.inFlight.settled();
  }

  /** Writes every buffered result, retrying while the database is unreachable, until `deadline`. */
  async drain(deadline: number): Promise<void> {
    this.draining = true;
    this.flushTimer.clear();
    this.retryTimer.clear();
    await this.inFlight.settled();
    while (this.results.unwritten > 0) {
      if (this.results.size > 0 && (await this.send(0))) continue;
      if (Date.now() > deadline) return;
      // The database is unreachable, or some rows were locked by another session.
      await new Promise((resolve) => setTimeout(resolve, this.results.size > 0 ? 200 : 50));
    }
  }

  private wantClaim(): boolean {
    return this.claimable() >= this.threshold();
  }

  /**
   * Jobs a new claim may ask for: what the slots want, less what the cycles out
   * asked for. A second claim goes out beside one in flight only while a backlog
   * drains: after a wake-up one claim finds what there is, and a second would come
   * back empty.
   */
  private claimable(): number {
    if (!this.mayHaveWork || this.stopping || (this.inFlight.size > 0 && !this.backlog)) return 0;
    return Math.max(0, this.target.wanted() - this.inFlight.requested);
  }

  /**
   * Claim only this many or more, unless a write goes out anyway. While a backlog
   * drains, a quarter of the capacity (slots plus active prefetch), at most a
   * quarter of a batch: a few jobs at a time would cost a round trip per few jobs.
   * After a wake, any free slot; and always with a strict limited queue (see
   * ClaimPlan.strict): nothing is claimed ahead there, so a slot left to wait for a
   * batch (or the completion flush timer) is a slot idle while its group may have
   * due jobs.
   */
  private threshold(): number {
    if (!this.backlog || (this.plan().strict.length > 0 && !this.limitedQuiet)) return 1;
    return Math.max(1, Math.floor(Math.min(this.target.capacity(), this.config.batchSize) / 4));
  }

  private kick(flush = false): void {
    if (flush) this.forceFlush = true;
    if (this.inFlight.full) {
      this.again = true;
      return;
    }
    if (this.scheduled) return;
    this.scheduled = true;
    // Jobs that finish in the same turn of the event loop share one statement.
    setImmediate(() => {
      this.scheduled = false;
      this.step();
    });
  }

  private step(): void {
    if (this.inFlight.full || this.retryTimer.armed || this.draining || this.orphans.running) return;
    if (this.orphans.due && !this.stopping) {
      // Once the cycle in flight is back (it kicks again).
      if (this.inFlight.size === 0) this.sweep();
      return;
    }
    const wanted = this.claimable();
    const claimNow = wanted >= this.threshold();
    const flushNow = this.results.size > 0 && (this.forceFlush || this.results.size >= this.config.batchSize);
    // Only limited queues, their claim out: nothing to send till it is back and kicks
    // (outside review 70: the loop spun through thousands of empty cycles meanwhile).
    const limitedOut = !flushNow && this.limited.busy && this.plan().plain.length === 0;
    if ((!claimNow && !flushNow) || limitedOut) {
      this.again ||= limitedOut;
      if (this.results.size > 0) this.armFlushTimer();
      return;
    }
    // Woken with no backlog (a job was just enqueued, workers idle) and only a few
    // results waiting: the claim goes alone, the cheap statement, and the results
    // keep their flush timer. Carried along, they made the claim a write (measured:
    // 1.4 ms instead of ~1 from enqueue to claimed, most of the pick-up latency).
    // More results ride along as before: under a steady stream of enqueues a flush
    // of their own would cost a statement per few jobs.
    const claimOnly =
      claimNow && !flushNow && !this.backlog && this.results.size < CLAIM_ALONE_BELOW && this.plainAlone(this.plan());
    if (claimOnly) {
      if (this.results.size > 0) this.armFlushTimer();
    } else {
      this.forceFlush = false;
      this.flushTimer.clear();
    }
    // A write that goes out anyway takes a claim along for free, even below the threshold.
    void this.send(Math.min(wanted, this.config.batchSize), !claimOnly).then(() => {
      if (this.draining) return;
      if (this.again || this.orphans.due || this.wantClaim()) {
        this.again = false;
        this.kick();
      } else if (this.results.size > 0) {
        this.armFlushTimer();
      }
    });
    // While a backlog drains, the second cycle goes out as soon as enough slots are wanted.
    if (this.backlog && this.wantClaim()) this.kick();
  }

  /** Sends the orphan sweep (see OrphanSweep): the rows a lost claim's reply may have locked here go back. */
  private sweep(): void {
    const sweep = () =>
      this.orphans.run().then(
        (released) => {
          // The backoff stays: only a cycle that goes through resets it.
          if (released > 0) this.mayHaveWork = true; // pending again
        },
        (err: unknown) => {
          this.onError(err);
          this.retryTimer.arm(this.retry.next());
        },
      );
    void this.inFlight.track(0, 0, sweep).then(() => {
      // Not for a claim that fails each time (a limited queue's): that would spin.
      if (this.again || this.results.size > 0 || this.wantClaim()) this.kick();
    });
  }

  private armFlushTimer(): void {
    if (!this.draining) this.flushTimer.arm(this.config.completionFlushMs);
  }

  /** Sends one cycle; resolves false when it failed. */
  private send(limit: number, withResults = true): Promise<boolean> {
    // Free slots another cycle out has promised to its jobs are not free for this one.
    const startNow = Math.min(limit, Math.max(0, this.target.free() - this.inFlight.startsRequested));
    if (this.inFlight.size > 0) this.stats.overlapped++;
    return this.inFlight.track(limit, startNow, () => this.cycle(limit, startNow, withResults));
  }

  /**
   * One statement: write results, claim up to `limit`; and the limited queues'
   * claims. A worker of limited queues alone sends those beside the write, not
   * after it: the claims are told which jobs are done here for good (not running
   * any more, though their rows say 'processing' until the write commits), so a slot
   * freed in a group at its limit is refilled one round trip later, not two.
   * With plain queues as well the claims follow the write, which may claim the
   * free slots first.
   */
  private async cycle(requested: number, startsRequested: number, withResults: boolean): Promise<boolean> {
    const wakesBefore = this.wakes;
    const batch = withResults ? this.results.take() : NO_RESULTS; // the results waiting keep their flush timer
    // A result sent alone to find the one Postgres refuses goes without a claim.
    const limit = batch.alone ? 0 : requested;
    const startNow = batch.alone ? 0 : startsRequested;
    const plan = this.plan();
    const claimLimited = limit > 0 && !this.plainAlone(plan) && !this.limited.busy;
    if (claimLimited) this.limited.busy = true;
    try {
      const alongside =
        claimLimited && plan.plain.length === 0
          ? this.limited.claim(plan.limited, limit, startNow, doneForGood(batch))
          : undefined;
      const wrote = await this.write(batch, plan, limit, startNow, wakesBefore);
      if (!claimLimited) return wrote;
      // Only after the write: its claim of plain queues fills the free slots first.
      if (!alongside && !wrote) return false;
      const { more, perStatement } = await (alongside ?? this.limited.claim(plan.limited, limit, startNow, []));
      // One statement per limited queue asked (the write's, if any, counted where it was sent).
      for (const claimed of perStatement) this.stats.cycle(1, claimed);
      if (plan.plain.length === 0) {
        // With no plain queue the write claimed nothing: whether a backlog drains
        // (claims batched, a second cycle overlapping) is the limited claims' to say.
        this.backlog = more;
        this.mayHaveWork = more || this.wakes !== wakesBefore;
      } else if (more) {
        this.mayHaveWork = true;
      }
      return wrote;
    } finally {
      if (claimLimited) this.limited.busy = false;
    }
  }

  /** The write of `batch` with the claim of plain queues; false when it failed. */
  private async write(
    batch: ResultBatch,
    plan: ClaimPlan,
    limit: number,
    startNow: number,
    wakesBefore: number,
  ): Promise<boolean> {
    // With limited queues, keep a slot per limited queue (up to half) out of the
    // common claim, so a backlog in unlimited queues cannot starve them.
    const plainLimit = this.plainAlone(plan) ? limit : limit - Math.min(plan.limited.length, this.limited.share(limit));
    const sentAt = performance.now();
    let result: CycleResult;
    // A worker of limited queues alone with nothing to write has no statement to send.
    const idle = plan.plain.length === 0 && batch.completed.length + batch.failed.length + batch.started.length === 0;
    try {
      result = idle
        ? NOTHING_SENT
        : await this.store.cycle({
            completed: batch.completed,
            failed: batch.failed,
            started: batch.started,
            startedAt: batch.startedAt,
            queues: plan.plain,
            tasks: this.config.tasks,
            limit: plainLimit,
            startNow: Math.min(plainLimit, startNow),
          });
    } catch (err) {
      const refused = isDataRejection(err) && batch.completed.length + batch.failed.length > 0;
      // A claim refused by Postgres claimed nothing; any other failure may have committed.
      if (plainLimit > 0 && plan.plain.length > 0 && !isDataRejection(err)) this.orphans.uncertain();
      const news = refused ? this.results.rejected(batch, err) : (this.results.restore(batch), true);
      // The claim may have committed with its reply lost: sweep() gives its jobs back.
      this.mayHaveWork = true;
      if (news) this.onError(err);
      if (this.stopping || this.draining) return false;
      // Refused values are no connection trouble: they go out alone or held, and the
      // loop goes on at once. Backing off here left a worker holding three refused
      // results sending only those, ever further apart, claiming nothing (review 41).
      if (refused) this.kick();
      else this.retryTimer.arm(this.retry.next());
      return false;
    }
    this.retry.reset();
    if (!idle) this.onWritten();
    // The claims of limited queues are counted where they are made.
    if (plan.plain.length > 0) {
      this.stats.cycle(limit, result.claimed.length);
      // Only a claim of plain queues alone says whether a wake found work.
      if (limit > 0 && plan.limited.length === 0) this.cooldown.claimed(result.claimed.length);
      if (limit > 0) {
        // A short claim means the backlog is empty, unless a wake arrived meanwhile.
        this.backlog = result.claimed.length >= plainLimit;
        this.mayHaveWork = this.backlog || this.wakes !== wakesBefore;
      }
    } else if (result !== NOTHING_SENT) {
      this.stats.cycles++;
    }
    // What the statement did is done: an exception from an event listener below
    // must neither undo it nor strand the jobs just claimed.
    if (batch.completed.length + batch.failed.length + batch.started.length > 0) {
      // This cycle is still counted as out: the others are those beside it.
      const othersBack = result.skipped.size > 0 ? this.inFlight.othersBack() : undefined;
      this.guard(() => this.results.applied(batch, result, othersBack));
    }
    if (result.claimed.length > 0) this.guard(() => this.target.claimed(result.claimed, performance.now() - sentAt));
    return true;
  }

  private guard(fn: () => void): void {
    try {
      fn();
    } catch (err) {
      this.onError(err);
    }
  }
}
