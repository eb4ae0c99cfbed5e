import { setMaxListeners } from 'node:events';
import type { WorkerStore } from '../db/worker-store.js';
import { SluiceError, type Snooze } from '../errors.js';
import type { JobRow } from '../job.js';
import type { Emit, HandBackReason } from './events.js';
import { handBackAfterRestart, writeSnooze } from './single-writes.js';

export interface SnoozeSignals {
  emit: Emit;
  dueAt(at: number): void;
  /** A snooze or hand-back failed for good. */
  writeError(err: unknown, what: 'hand-back' | 'snooze'): void;
  /** A hand-back given up because its handler never stopped. */
  error(err: unknown): void;
}

/**
 * The worker's snoozes and hand-backs in flight: each written on its own (they
 * are rare), its job still this worker's (heartbeated, listed when its row is
 * held) until written; on stop, given up where another session still holds the row.
 */
export class Snoozes {
  /** The write in flight per job. */
  private readonly inFlight = new Map<string, Promise<void>>();
  /** Fires at stop(): writes stop asking again for rows another session holds, or for a lost connection. */
  private readonly stopping = new AbortController();
  /** Given up at stop, their rows still held: still this worker's, unwritten. */
  private readonly leftAtStop = new Set<string>();
  /** Jobs aborted in an outage, their restart check in flight (see afterOutage). */
  private readonly checking = new Set<string>();
  /** Left processing for the rescuer (a handler that never stopped), until it has surely taken them. */
  private readonly forRescue = new Set<string>();

  constructor(
    private readonly store: WorkerStore,
    private readonly visibilityTimeoutMs: number,
    private readonly signals: SnoozeSignals,
  ) {
    // One listener per hand-back waiting for its handler: an outage aborts many at
    // once (outside review 114: a MaxListenersExceededWarning at concurrency 20).
    setMaxListeners(0, this.stopping.signal);
  }

  /** The jobs of the writes in flight, and of those given up at stop. */
  ids(): string[] {
    return [...this.inFlight.keys(), ...this.leftAtStop];
  }

  /**
   * The jobs whose restart check is in flight: still this worker's, but not to be
   * heartbeated, as the check reads their locks' age.
   */
  get checkingRestart(): ReadonlySet<string> {
    return this.checking;
  }

  /**
   * A job whose handler was aborted because its lock could not be renewed while
   * Postgres was unreachable: once the handler has stopped (`after`, as for a
   * row-held hand-back: outside review 111 saw one that ignored its signal run
   * beside its re-run), handed back without spending the attempt if Postgres
   * restarted since the lock was last renewed or, `unanswered`, if the job is still
   * this worker's (its beats went out and were not answered), else `charge()` (the failure is
   * written as usual; `refundedBefore`: Postgres did restart, but the previous
   * attempt was given back already). Resolves when done or given up (the job
   * left processing for the rescuer).
   */
  afterOutage(
    job: JobRow,
    after: Promise<boolean>,
    charge: (refundedBefore: boolean) => void,
    unanswered = false,
  ): Promise<void> {
    this.checking.add(job.id);
    const done = this.whenStopped(job, after, async () => {
      const verdict = await handBackAfterRestart(this.store, job, this.signals, this.stopping.signal, unanswered);
      this.checking.delete(job.id);
      if (verdict === 'charge' || verdict === 'refunded-before') charge(verdict === 'refunded-before');
      // Unwritten at stop (Postgres still away, or the row held): told as such, and kept from the stop's sweep.
      if (verdict === 'stopped') this.leftAtStop.add(job.id);
    });
    void done.finally(() => this.checking.delete(job.id));
    return done;
  }

  /**
   * Back to pending at the snooze time, the attempt not spent. With `after`, once
   * the job's handler has stopped (see whenStopped). Resolves when written or given up.
   */
  write(job: JobRow, snooze: Snooze, handBack?: HandBackReason, after?: Promise<boolean>): Promise<void> {
    return this.whenStopped(job, after, async () => {
      if (!(await writeSnooze(this.store, job, snooze, this.signals, this.stopping.signal, handBack))) {
        this.leftAtStop.add(job.id);
      }
    });
  }

  /**
   * Runs `write` once the job's handler has stopped (`after` resolves true; at once
   * without `after`); not at all when it did not within a visibility timeout
   * (false: left for the rescuer), nor once the worker stops first (the job stays
   * processing, as the stop's other such jobs).
   */
  private whenStopped(job: JobRow, after: Promise<boolean> | undefined, write: () => Promise<void>): Promise<void> {
    const { signal } = this.stopping;
    let onStop = (): void => {};
    const stop = new Promise<'stopping'>((resolve) => (onStop = () => resolve('stopping')));
    if (after) signal.addEventListener('abort', onStop, { once: true });
    const done = Promise.race([after ?? true, stop]).then(async (go) => {
      if (go === 'stopping') return;
      if (!go) return this.leftForRescue(job);
      await write();
    });
    this.inFlight.set(job.id, done);
    void done.finally(() => {
      signal.removeEventListener('abort', onStop);
      if (this.inFlight.get(job.id) === done) this.inFlight.delete(job.id);
    });
    return done;
  }

  /** Writes in flight give up what they cannot write now (see write). */
  stop(): void {
    this.stopping.abort();
  }

  /**
   * Jobs left processing for the rescuer, their handlers still running: still
   * locked to this worker though it holds them no more. The orphan sweep must
   * leave them be (outside review 112: it gave one back, its attempt uncounted,
   * and the same worker ran it again beside its running handler).
   */
  leftToRescuer(): string[] {
    return [...this.forRescue];
  }

  /** Claimed again by this worker: held as any job is (see leftToRescuer). */
  claimed(ids: readonly string[]): void {
    if (this.forRescue.size > 0) for (const id of ids) this.forRescue.delete(id);
  }

  private leftForRescue(job: JobRow): void {
    // Kept until claimed again here: the rescue may come much later than a visibility
    // timeout (outside review 114: a second outage put it off, a timer dropped the
    // job first, and the sweep gave it back, attempt uncounted, with no trace).
    this.forRescue.add(job.id);
    this.signals.error(
      new SluiceError(
        'LOCK_LOST',
        `job ${job.id}: its handler did not stop within ${this.visibilityTimeoutMs} ms of its abort; ` +
          'not handed back but left processing for the rescuer, which returns it a visibility timeout after its ' +
          'last heartbeat (spending its attempt); ' +
          'if the handler still runs then, the next attempt runs beside it (handlers must honour their signal)',
      ),
    );
  }
}
