import type { WorkerStore } from '../db/worker-store.js';
import { Loop } from '../lifecycle/loop.js';

export interface HeartbeatConfig {
  /** How often the locks are renewed. */
  intervalMs: number;
  /** A job whose lock could not be renewed for this long is given up (see `unrenewed`). */
  renewalTimeoutMs: number;
  /** When the rescuer may take a lock not renewed (see `watch`: a blocked event loop's last chance). */
  visibilityTimeoutMs: number;
}

/** What the heartbeat tells the worker. */
export interface HeartbeatSignals {
  /** Every job this worker holds. */
  held(): string[];
  /** Of those, the ones a beat asks about now (not, say, results being written). */
  renewable(held: string[]): string[];
  /** These were taken away (rescued, finished elsewhere): stop their handlers. */
  lost(ids: string[]): void;
  /** These were cancelled: stop their handlers, as the cancel's NOTIFY would have. */
  cancelled(ids: string[]): void;
  /**
   * These could not be renewed for renewalTimeoutMs (the database unreachable, or
   * their rows locked by another session): abort their handlers now, before the
   * visibility timeout lets the rescuer give them to another worker. `rowHeld`:
   * those of them whose latest beats were answered, saying another session held
   * the row (the worker and the database are fine; not the job's doing).
   * `unanswered`: those of them renewed by no beat since, though beats went out
   * and none of them was answered (not the job's doing either, unlike a handler
   * that blocked the event loop: then no beat went out, and the watcher ran late).
   */
  unrenewed(ids: string[], rowHeld: ReadonlySet<string>, unanswered: ReadonlySet<string>): void;
  /** rowHeld() changed: a job's row was found held by another session, or one was renewed again. */
  rowHeldChanged(): void;
  /** A beat was answered: Postgres takes the worker's statements. */
  answered(): void;
  error(err: unknown): void;
}

/**
 * Keeps the locks of this worker's jobs fresh: one statement per interval for all
 * of them (running, waiting for a slot, or finished with the result not yet
 * written), and watches how long ago each was last renewed.
 *
 * A renewal counts from the moment its statement was sent (the server stamps a
 * later time), so the worker's view of a lock's age is never younger than the
 * rescuer's. A worker cut off from Postgres therefore aborts its handlers
 * (renewalTimeoutMs) before any other worker can be handed their jobs
 * (visibilityTimeoutMs): handlers that honour their signal never overlap.
 */
export class Heartbeat {
  /** Renews the locks: every interval, or a quarter of it after rows another session held were skipped. */
  private readonly beats: Loop<boolean>;
  /** Looks for locks older than renewalTimeoutMs. */
  private readonly watcher: Loop;
  /** performance.now() when each held job's lock was last known to be renewed (or claimed). */
  private readonly renewedAt = new Map<string, number>();
  /** Reported as unrenewed already: told once. */
  private readonly given = new Set<string>();
  /** performance.now() of the latest answered beat that found each job's row held by another session. */
  private readonly heldAt = new Map<string, number>();
  /**
   * Jobs the latest answered beat skipped (their rows locked) that no beat before
   * it had: a row is taken as held by another session only when two beats in a
   * row find it locked. A single skip is as likely this worker's own statement
   * beside the beat (a progress report, a start or result being written); listed
   * as held in the registry, a job whose worker was SIGKILLed just then was
   * rescued with its attempt refunded (outside review 144).
   */
  private readonly skippedOnce = new Set<string>();
  /** The jobs the beat in flight asks about, and those of them claimed again meanwhile. */
  private asking: Set<string> | undefined;
  private readonly claimedMeanwhile = new Set<string>();
  /** performance.now() when the latest beat was sent, and when the latest one that got an answer was. */
  private lastSentAt: number | undefined;
  private lastAnsweredAt: number | undefined;
  /** performance.now() of the watcher's previous pass: a late one says the event loop was held up. */
  private lastWatchAt: number | undefined;
  private readonly watchIntervalMs: number;

  constructor(
    private readonly store: WorkerStore,
    private readonly config: HeartbeatConfig,
    private readonly signals: HeartbeatSignals,
  ) {
    this.beats = new Loop({
      pass: () => this.renew(),
      // Rows another session holds were not renewed: ask again well before the next beat.
      intervalMs: (skipped) => (skipped ? config.intervalMs / 4 : config.intervalMs),
      onError: (err) => signals.error(err),
    });
    this.watchIntervalMs = Math.min(1_000, config.intervalMs / 2);
    this.watcher = new Loop({ pass: () => this.watch(), intervalMs: this.watchIntervalMs });
  }

  /**
   * Jobs claimed by a statement sent at `sentAt` (performance.now()). A new lock:
   * one given up before (the same worker may claim a job again before the watcher
   * sees it go) is reported again if this one cannot be renewed either.
   */
  claimed(ids: readonly string[], sentAt: number): void {
    for (const id of ids) {
      this.renewedAt.set(id, sentAt);
      this.given.delete(id);
      // A new lock: whatever held the row of its previous attempt is past (a row-held
      // job handed back and claimed again at once must not stay listed as held).
      this.heldAt.delete(id);
      this.skippedOnce.delete(id);
      if (this.asking?.has(id)) this.claimedMeanwhile.add(id);
    }
  }

  start(): void {
    // From now, not from the first pass: a handler that blocked the loop before the
    // watcher's first pass was not seen as a block (its jobs were failed for it).
    this.lastWatchAt = performance.now();
    this.beats.start();
    this.watcher.start();
  }

  /** Sends no statement after this; resolves once the beat in flight has ended. */
  async stop(): Promise<void> {
    await Promise.all([this.beats.stop(), this.watcher.stop()]);
  }

  /** Renews the locks now (or right after the beat in flight). */
  beat(): Promise<void> {
    return this.beats.trigger();
  }

  /** One statement for all held jobs; true when some rows were skipped (locked by another session). */
  private async renew(): Promise<boolean> {
    const ids = this.signals.renewable(this.signals.held());
    if (ids.length === 0) return false;
    const sentAt = performance.now();
    this.lastSentAt = sentAt;
    this.asking = new Set(ids);
    const limitMs = beatLimitMs(this.config);
    try {
      const { done, skipped, cancelled } = await this.store.heartbeat(ids, limitMs).catch((err: unknown) => {
        // Past its limit, its connection was dropped (gone silent, most likely): the
        // next beat goes out at once, on another, not an interval later.
        if (performance.now() - sentAt >= limitMs) this.beats.runSoon(0);
        throw err;
      });
      this.lastAnsweredAt = sentAt;
      this.signals.answered();
      let changed = false;
      for (const id of done) {
        this.renewedAt.set(id, sentAt);
        this.skippedOnce.delete(id);
        changed = this.heldAt.delete(id) || changed;
      }
      const answeredAt = performance.now();
      for (const id of skipped) {
        if (!this.heldAt.has(id) && !this.skippedOnce.has(id)) {
          this.skippedOnce.add(id);
          continue;
        }
        this.skippedOnce.delete(id);
        changed = !this.heldAt.has(id) || changed;
        this.heldAt.set(id, answeredAt);
      }
      if (changed) this.signals.rowHeldChanged();
      // A job may have finished while the statement ran; only those still held count.
      // A job claimed again while it ran may have been claimed after its snapshot:
      // the row it did not find is that claim's new attempt, not a lock taken away
      // (a job rescued from this worker and claimed by it again; the old attempt is
      // told lost by the claim itself). CI: the new attempt was told lost and dropped.
      const still = new Set(this.signals.held());
      const gone = ids.filter((id) => !done.has(id) && !skipped.has(id) && still.has(id) && !this.claimedMeanwhile.has(id));
      const cancels = gone.filter((id) => cancelled.has(id));
      if (cancels.length > 0) this.signals.cancelled(cancels);
      if (cancels.length < gone.length) this.signals.lost(gone.filter((id) => !cancelled.has(id)));
      return skipped.size > 0;
    } finally {
      this.asking = undefined;
      this.claimedMeanwhile.clear();
    }
  }

  /**
   * The held jobs whose latest answered beat found their rows held by another
   * session: no beat can renew them, and the rescuer must leave them to this
   * worker (it hands them back, or writes their results, once the rows are free).
   */
  rowHeld(): string[] {
    const held = new Set(this.signals.held());
    return [...this.heldAt.keys()].filter((id) => held.has(id));
  }

  /** Reports held jobs whose lock is older than renewalTimeoutMs; forgets jobs no longer held. */
  private watch(): void {
    const held = new Set(this.signals.held());
    const now = performance.now();
    // A watcher pass far later than its interval: the event loop was held up (a
    // handler blocking it), and beats could not go out either.
    const loopHeld = this.lastWatchAt !== undefined && now - this.lastWatchAt > 2 * this.watchIntervalMs + 100;
    this.lastWatchAt = now;
    const expired: string[] = [];
    const rowHeld = new Set<string>();
    const unanswered = new Set<string>();
    // After a block, no beat could go out: the locks are old because the loop was
    // held, not because Postgres did not answer. One beat now, and the next pass
    // (an interval of this watcher later, still before the visibility timeout)
    // decides: aborted at once, every job beside a handler that blocked the loop for
    // a little less than the renewal timeout was failed, though its lock was valid
    // (outside review 215: its age counts from the beat before the block).
    const lastChanceMs = this.config.visibilityTimeoutMs - this.watchIntervalMs;
    let renewFirst = false;
    for (const [id, at] of this.renewedAt) {
      if (!held.has(id)) {
        this.renewedAt.delete(id);
        this.given.delete(id);
        this.heldAt.delete(id);
        this.skippedOnce.delete(id);
      } else if (loopHeld && now - at > this.config.renewalTimeoutMs && now - at < lastChanceMs && !this.given.has(id)) {
        renewFirst = true;
      } else if (now - at > this.config.renewalTimeoutMs && !this.given.has(id)) {
        this.given.add(id);
        expired.push(id);
        // Beats go out every quarter interval while rows are held: one answered within
        // the interval says the worker and the database are fine, and the row held.
        const heldAt = this.heldAt.get(id);
        if (heldAt !== undefined && now - heldAt <= this.config.intervalMs) rowHeld.add(id);
        // Beats went out after its last renewal and none sent since was answered (some
        // may have timed out, one may still wait): Postgres did not answer the worker.
        // Not the time the latest went out: a beat that timed out leaves a gap of up to
        // an interval before the next (outside review 146, statement timeout VT / 2).
        else if (
          !loopHeld &&
          this.lastSentAt !== undefined &&
          this.lastSentAt > at &&
          !((this.lastAnsweredAt ?? -Infinity) > at)
        ) {
          unanswered.add(id);
        }
      }
    }
    if (renewFirst) this.beats.runSoon(0);
    if (expired.length > 0) this.signals.unrenewed(expired, rowHeld, unanswered);
  }
}

/**
 * The time limit of one beat. A beat sent just as the network went silent waited
 * for the statement time limit (30 s by default, above the 22.5 s renewal
 * timeout): a drop of two seconds aborted every running handler (outside review
 * 160). Past this limit the beat is given up, its connection dropped, and the next
 * sent at once, in time to renew the locks whose last renewal was the beat before
 * it, an interval earlier: renewal timeout less two intervals, and never under
 * half an interval (a heartbeat statement takes milliseconds). The driver's
 * statement time limit still applies where shorter.
 */
export function beatLimitMs(config: Pick<HeartbeatConfig, 'intervalMs' | 'renewalTimeoutMs'>): number {
  return Math.max(config.renewalTimeoutMs - 2 * config.intervalMs, config.intervalMs / 2);
}

/**
 * How late a claim's reply may come for its jobs to start: their locks date from
 * the claim's send, and the next beat may come a heartbeat interval later, so a
 * reply later than the renewal timeout less that interval would see them aborted
 * (and their attempts spent) before any renewal could land. Never under half the
 * renewal timeout, where an interval close to the timeout would hand back every claim.
 */
export function lateClaimMs(config: Pick<HeartbeatConfig, 'intervalMs' | 'renewalTimeoutMs'>): number {
  return Math.max(config.renewalTimeoutMs - config.intervalMs, config.renewalTimeoutMs / 2);
}
