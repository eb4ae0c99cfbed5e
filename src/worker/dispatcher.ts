import { JobCancelledError, SluiceError } from '../errors.js';
import type { JobRow } from '../job.js';
import { Backoff } from '../lifecycle/backoff.js';
import { OneShotTimer } from '../lifecycle/one-shot-timer.js';
import { serializePayload } from '../payload.js';
import { CancelsHeard } from './cancels-heard.js';
import type { Completer } from './completer.js';
import type { Emit, HandBackReason } from './events.js';
import type { ResolvedTask } from './task-options.js';
import type { ProgressWriter } from './progress.js';
import { ABORTED_HANDLER_GRACE_MS, Run, type AbortCause, type Outcome } from './run.js';
import type { Slots } from './slots.js';

/** The outcome of a run whose lock was taken away: nothing to write. */
const LOST: Outcome = { kind: 'lost' };

/**
 * A job claimed ahead that waited this long for a slot goes back to pending for
 * any worker: the prefetch estimate was wrong (its slots hold slower jobs than it
 * expected), and the job must not wait behind them.
 */
export const HAND_BACK_AFTER_MS = 500;

export interface DispatcherConfig {
  tasks: ReadonlyMap<string, ResolvedTask>;
  maxResultBytes: number;
  /** After a lost lock, how long a handler that ignores its signal keeps new attempts of its job off this worker. */
  visibilityTimeoutMs: number;
  /** A claim answered later than this after it was sent starts none of its jobs (see claimed(), lateClaimMs()). */
  lateClaimMs: number;
}

/** What the dispatcher needs from the rest of the worker. */
export interface DispatcherSignals {
  emit: Emit;
  /** False once the worker is stopping: claimed jobs then wait to be handed back. */
  accepting(): boolean;
  /** A run of `job` ended and its slot is free. */
  finished(job: JobRow): void;
  /**
   * Why a job a claim just brought must go back unstarted: its queue was paused
   * (or is being flagged grouped, or given a limit that counts claimed jobs, and
   * the job was claimed ahead) while the claim was out. undefined: it runs.
   */
  stale?(job: JobRow): HandBackReason | undefined;
  error(err: unknown): void;
}

const TAKEN = 'aborted before the visibility timeout lets another worker take it';

/** Why a run's lock could not be renewed (Dispatcher.unrenewed), after `ms` of trying. */
const UNRENEWED = {
  'row-held': (ms: number) =>
    `another session held its row locked for ${ms} ms, so its lock could not be renewed; ${TAKEN}, and handed back ` +
    'without spending the attempt',
  unanswered: (ms: number) =>
    `Postgres did not answer its worker's heartbeats for ${ms} ms (a lock on the jobs table, an outage), so its lock ` +
    `could not be renewed; ${TAKEN}`,
  unrenewed: (ms: number) => `its lock could not be renewed for ${ms} ms; ${TAKEN}`,
} satisfies Partial<Record<AbortCause, (ms: number) => string>>;

/**
 * Starts claimed jobs as slots free, and ends runs the worker must give up: a
 * lost lock, a cancel, a lock it could not renew, or a job claimed ahead that
 * waited too long for a slot (handed back). Each run's outcome goes to the
 * Completer.
 */
export class Dispatcher {
  private readonly handBackTimer = new OneShotTimer(() => this.handBackOverdue(), true);
  private holds = 0;
  /** Hand-backs whose statement failed, so whether they committed is unknown: tried again. */
  private readonly unsure: { jobs: JobRow[]; reason: HandBackReason }[] = [];
  private readonly unsureTimer = new OneShotTimer(() => this.retryUnsure(), true);
  private readonly unsureRetry = new Backoff({ minMs: 250, maxMs: 5_000 });
  /** See settlingIds(). */
  private readonly settling = new Set<string>();
  private readonly cancelsHeard: CancelsHeard;

  constructor(
    private readonly slots: Slots,
    private readonly completer: Completer,
    private readonly progress: ProgressWriter,
    private readonly config: DispatcherConfig,
    private readonly signals: DispatcherSignals,
  ) {
    this.cancelsHeard = new CancelsHeard(config.lateClaimMs);
  }

  /**
   * Claimed jobs: they start at once where slots are free, the rest wait. The
   * claim's reply came `roundTripMs` after it was sent; one that came too
   * late for their locks to be renewed in time (a network that stalled, then
   * delivered: lateClaimMs()) would see the jobs aborted soon after they started,
   * their attempts spent (outside review 118: jobs of one attempt, pending all
   * through a blackhole, failed 0.5-1 s after starting). They go back unstarted,
   * their attempts not spent.
   */
  claimed(jobs: readonly JobRow[], roundTripMs = 0): void {
    const late = roundTripMs > this.config.lateClaimMs;
    // Claimed again here: their hand-back committed, whatever its reply says. Told
    // now, before they start, not when that reply comes (review 50: after).
    const back = new Map<HandBackReason, JobRow[]>();
    for (const { job, reason } of this.slots.takeReclaimed(jobs)) {
      const handed = back.get(reason) ?? [];
      back.set(reason, handed);
      handed.push(job);
    }
    for (const [reason, handed] of back) this.signals.emit('jobs:handed-back', handed, { reason });
    // Claimed again while an earlier attempt is still held here: that attempt's
    // lock was taken back (a rescuer judged it expired: one with a shorter
    // visibility timeout, say) before this worker's heartbeat noticed, and the row
    // keeps this worker's name, so no heartbeat would. That run is over (lock lost,
    // its signal aborted, its result not written); the new attempt waits for its
    // handler to stop (Slots.nextToStart). Outside review 85: five attempts of one
    // job ran at once in one worker, none told.
    this.lockLost(jobs.filter((job) => this.slots.holds(job.id)).map((job) => job.id));
    this.signals.emit('jobs:claimed', [...jobs]);
    this.slots.hold(jobs);
    // A claim sent before its queue was paused (or limited) can land after the
    // worker heard of it and handed back what it held there: those jobs go back too.
    const stale = new Map<HandBackReason, Set<string>>();
    for (const job of jobs) {
      const reason = late ? 'late-claim' : this.cancelsHeard.take(job, roundTripMs) ? 'cancelled' : this.signals.stale?.(job);
      if (!reason) continue;
      const ids = stale.get(reason) ?? new Set<string>();
      stale.set(reason, ids.add(job.id));
    }
    for (const [reason, ids] of stale) {
      const back = this.signals.accepting() ? this.slots.takeWaitingIds(ids, reason) : [];
      if (back.length > 0) void this.handBack(back, reason);
    }
    this.startWaiting();
  }

  /**
   * Jobs whose handlers a stop aborted, until they stop or their grace ends: their
   * runs have left their slots, but the handlers may still work on them. Their
   * locks are renewed meanwhile: a 1 s visibility timeout ran out within the grace,
   * and the rescuer gave a job whose handler still ran to another worker (outside
   * review 199).
   */
  settlingIds(): string[] {
    // A fatal stop's runs keep their slots until their handlers stop: listed there already.
    return [...this.settling].filter((id) => !this.slots.holds(id));
  }

  /**
   * Starts nothing until releaseStarts(): the worker is re-reading the queue
   * settings after a control message, and a pause or a lowered limit there must
   * not see the jobs it claimed ahead start meanwhile (up to ~170 ms of starts
   * under load, outside review). Counted: overlapping re-reads each release once.
   */
  holdStarts(): void {
    this.holds++;
  }

  releaseStarts(): void {
    if (this.holds > 0 && --this.holds === 0) this.startWaiting();
  }

  /** Starts waiting jobs while slots are free (not once the worker is stopping, or while starts are held). */
  startWaiting(): void {
    if (!this.signals.accepting() || this.holds > 0) return;
    for (let job = this.slots.nextToStart(); job; job = this.slots.nextToStart()) this.run(job);
    this.armHandBack();
  }

  /**
   * Aborts every running handler (stop): they end as 'released'. Returns their
   * jobs: those whose handlers stopped within `settleMs` of the abort, and those
   * whose handlers still run (they ignore their signal).
   */
  async abortAll(
    reason: Error,
    settleMs: number,
    cause: 'shutdown' | 'fatal' = 'shutdown',
  ): Promise<{ stopped: JobRow[]; stillRunning: JobRow[] }> {
    this.handBackTimer.clear();
    const runs = [...this.slots.runningJobs()];
    for (const run of runs) this.settling.add(run.job.id);
    for (const run of runs) run.abort(cause, reason);
    const stopped = await Promise.all(runs.map((run) => run.handlerStopped(settleMs)));
    for (const run of runs) this.settling.delete(run.job.id);
    return {
      stopped: runs.filter((_, i) => stopped[i]).map((r) => r.job),
      stillRunning: runs.filter((_, i) => !stopped[i]).map((r) => r.job),
    };
  }

  /**
   * Attempt `attempt` of the job was cancelled (undefined: the one held here, as
   * the heartbeat found it): a waiting job never starts, a running one is aborted,
   * and one a claim still out brings is not started (CancelsHeard). Another
   * attempt, the job retried since, is left alone (outside review 261: a late
   * notification aborted it, and it stayed processing until the rescuer came).
   */
  cancel(id: string, attempt?: number): void {
    const cancels = (job: JobRow) => attempt === undefined || job.attempts === attempt;
    const run = this.slots.runOf(id);
    if (run && cancels(run.job)) run.abort('cancelled', new JobCancelledError(`job ${id} was cancelled`));
    const waiting = this.slots.waitingJob(id);
    if (waiting && cancels(waiting)) this.slots.dropWaiting(id);
    // Only with the attempt a notification named: the heartbeat's cancels (none named)
    // are of jobs held here, and one kept for any attempt marked the retry claimed
    // next (outside review 263: handed back as 'cancelled').
    if (!run && !waiting && attempt !== undefined) this.cancelsHeard.add(id, attempt);
  }

  /** The heartbeat found these taken away: their runs' results must not count. */
  lockLost(ids: readonly string[]): void {
    for (const id of ids) {
      // A hand-back went through (the beat raced it, or its outcome was unknown), or the
      // rescuer took the job: nothing to retry; told if the hand-back lands.
      if (this.slots.expireReleasing(id)) continue;
      const waiting = this.slots.dropWaiting(id);
      if (waiting) {
        this.signals.emit('job:lock-lost', waiting);
        continue;
      }
      const run = this.slots.runOf(id);
      // A cancelled job's lock went with its cancel, which its run has had (job:cancel): not lost too.
      // One already told lost is not told again (its heartbeat may find it gone once more).
      if (!run || run.abortCause === 'cancelled') continue;
      if (run.loseLock(new SluiceError('LOCK_LOST', `job ${id}: lock expired and the job was taken back`))) {
        this.signals.emit('job:lock-lost', run.job);
      }
    }
  }

  /**
   * Locks that could not be renewed in time: give those jobs up before anyone can
   * rescue them. A run whose row another session held ('row-held') is handed back
   * without spending its attempt: an admin's or a report's row lock (FOR UPDATE) made a job of
   * one attempt a dead letter (outside review 102). One whose beats were not
   * sent (the event loop blocked by its handler) fails the attempt, so a handler
   * that blocks for ever runs out of attempts. One whose beats went out and were
   * not answered (`unanswered`: a lock on the jobs table, Postgres away) is given
   * its attempt back if the job is still this worker's once Postgres answers, or if
   * Postgres restarted meanwhile (Completer: 'unrenewed'; outside review 145: a
   * 10 s LOCK TABLE made every running job of one attempt a dead letter).
   */
  unrenewed(
    ids: readonly string[],
    renewalTimeoutMs: number,
    rowHeld: ReadonlySet<string> = new Set(),
    unanswered: ReadonlySet<string> = new Set(),
  ): void {
    const waiting: JobRow[] = [];
    for (const id of ids) {
      const job = this.slots.dropWaiting(id);
      if (job) waiting.push(job);
      this.slots.expireReleasing(id);
      const run = this.slots.runOf(id);
      if (!run) continue;
      const cause = rowHeld.has(id) ? 'row-held' : unanswered.has(id) ? 'unanswered' : 'unrenewed';
      run.abort(cause, new SluiceError('LOCK_LOST', `job ${id}: ${UNRENEWED[cause](renewalTimeoutMs)}`));
    }
    if (waiting.length === 0) return;
    for (const job of waiting) this.signals.emit('job:lock-lost', job);
    // Never started: hand them back if the database answers, else the rescuer does
    // (without counting the attempt, as they never started).
    void this.completer.release(waiting).catch((err: unknown) => this.signals.error(err));
  }

  private run(job: JobRow): void {
    const task = this.config.tasks.get(job.task);
    if (!task) return; // cannot happen: the claim filters on known tasks
    const run = new Run(job, task, this.onProgress);
    this.slots.start(run);
    // Claimed ahead: the database learns that it started with the next cycle, at
    // the time its handler is told now.
    if (run.claimedAhead) {
      this.completer.markStarted(job.id, run.startedAtMs);
      job.started_at = new Date(run.startedAtMs);
    }
    this.signals.emit('job:start', job);
    void run.run().then(async (outcome) => {
      const durationMs = performance.now() - run.startedAt;
      // Aborted but for a stop (which waits for handlers itself): the slot and the
      // job stay this run's until its handler has stopped, up to a grace period. A
      // timed-out handler honouring its signal with some clean-up otherwise overlapped
      // its own retry, in a slot refilled beyond concurrency (outside review 61); the
      // heartbeat keeps the job meanwhile.
      const cause = run.abortCause;
      const stopped = !cause || cause === 'shutdown' || (await run.handlerStopped(ABORTED_HANDLER_GRACE_MS));
      // Taken also for a run whose job was taken away, so no report of it stays behind.
      const progress = this.progress.ended(job.id);
      if (!this.slots.finish(run, durationMs)) return;
      // After a lost lock its slot is given up, not its job: a new attempt claimed
      // here waits until the handler returns (outside review 88: a handler that
      // ignored its signal ran on beside its own retry, in the same process), for up
      // to a visibility timeout, after which it counts as hung, as the rescuer would
      // count it. Not after a timeout: retrying a hung handler's job is what it is for.
      if (!stopped && cause !== 'timeout') {
        void this.slots.outlived(run, this.config.visibilityTimeoutMs).then(() => this.startWaiting());
      }
      this.startWaiting();
      // Found taken away after something else aborted it (an unrenewed lock): already
      // told lost, and its failure would only be refused (and told lost again). A
      // fatal stop's handler that runs on is left processing for the rescuer, as after
      // a crash: its failure written, another worker could start the retry while it
      // still ran in this process, not yet exited (outside review 196: 0.6 s overlap).
      const runsOn = cause === 'fatal' && !stopped;
      this.completer.record(run, run.lockLost || runsOn ? LOST : outcome, durationMs, progress);
      this.signals.finished(job);
    });
  }

  /** ctx.progress() of every run (one function, not one per run). */
  private readonly onProgress = (value: unknown, run: Run): void => this.reportProgress(run, value);

  /** ctx.progress(): refuse what is not JSON at the call, then write it batched. */
  private reportProgress(run: Run, value: unknown): void {
    // undefined clears the report (JSON null), where a payload's undefined means {}.
    const json = value === undefined ? 'null' : serializePayload(value, this.config.maxResultBytes, 'progress');
    if (this.slots.runOf(run.job.id) !== run) return; // reported after the run ended
    this.progress.report(run.job.id, json);
    this.signals.emit('job:progress', run.job, { progress: value });
  }

  /** Jobs claimed ahead that waited too long go back to pending for any worker. */
  private armHandBack(): void {
    const since = this.slots.oldestWaitingSince();
    if (since === undefined || this.handBackTimer.armed) return;
    this.handBackTimer.arm(Math.max(0, since + HAND_BACK_AFTER_MS - Date.now()));
  }

  private handBackOverdue(): void {
    if (!this.signals.accepting()) return;
    const overdue = this.slots.takeOverdue(HAND_BACK_AFTER_MS);
    if (overdue.length > 0) void this.handBack(overdue, 'overdue');
    this.armHandBack();
  }

  /**
   * Hands back the jobs of `queue` claimed ahead: it turned out grouped (they were
   * not claimed in turn), or was paused or limited since they were claimed.
   */
  handBackQueue(queue: string, reason: HandBackReason): void {
    if (!this.signals.accepting()) return;
    const jobs = this.slots.takeWaitingIn(queue, reason);
    if (jobs.length > 0) void this.handBack(jobs, reason);
  }

  private async handBack(jobs: JobRow[], reason: HandBackReason): Promise<void> {
    let left: Set<JobRow>;
    let released: JobRow[];
    try {
      const result = await this.completer.release(jobs);
      left = new Set(result.left);
      released = result.released;
    } catch (err) {
      this.signals.error(err);
      // A statement that failed may have committed all the same (its reply lost
      // as Postgres went down, or the wake-up after it failed): the jobs may be
      // pending again, or running in another worker already, so they must never
      // start here (review 47: 227 jobs ran twice after a crash). They stay held,
      // so the heartbeat renews those still this worker's and gives up the others,
      // and the hand-back is tried again: it only touches rows still this worker's.
      this.retryHandBack(jobs, reason);
      return;
    }
    this.unsureRetry.reset();
    // Given back, or no longer this worker's (rescued meanwhile: not told).
    const back = jobs.filter((j) => !left.has(j));
    // Those claimed again meanwhile are no longer being handed back: reported then.
    const untold = this.slots.untold(released);
    if (untold.length > 0) this.signals.emit('jobs:handed-back', untold, { reason });
    // Rows another session held locked were not touched: still ours, waiting again;
    // but not a late claim's, whose locks may be too old to run on: tried again.
    const lateClaim = reason === 'late-claim' && left.size > 0;
    this.slots.handedBack(back, lateClaim ? [] : [...left]);
    if (lateClaim) this.retryHandBack([...left], reason);
    else if (left.size > 0 && this.signals.accepting()) this.startWaiting();
  }

  private retryHandBack(jobs: JobRow[], reason: HandBackReason): void {
    this.unsure.push({ jobs, reason });
    if (!this.unsureTimer.armed) this.unsureTimer.arm(this.unsureRetry.next());
  }

  private retryUnsure(): void {
    // Once the worker stops, its own hand-back takes them (takeUnsureHandBacks).
    if (!this.signals.accepting()) return;
    for (const batch of this.unsure.splice(0)) {
      const still = this.slots.stillReleasing(batch.jobs);
      this.slots.forgetExpired(batch.jobs.filter((job) => !still.includes(job)));
      if (still.length > 0) void this.handBack(still, batch.reason);
    }
  }

  /** Stop: the jobs of hand-backs still to be tried again, for the stop's own hand-back. */
  takeUnsureHandBacks(): JobRow[] {
    this.unsureTimer.clear();
    const jobs = this.unsure.splice(0).flatMap((batch) => batch.jobs);
    this.slots.forgetExpired(jobs);
    return this.slots.takeReleasing(jobs);
  }
}
