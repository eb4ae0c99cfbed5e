import { DatabaseError } from '../errors.js';
import type { BackoffOptions } from './backoff.js';
import { LockedResults } from './locked-results.js';
import { describeRefusal, expired, failureInPlaceOf, type Recorded } from './outcome-records.js';

export interface RefusedResultsSignals {
  /** Results to go out with the next cycle as usual (called after every return, maybe with none: a write is due). */
  back(results: Recorded[]): void;
  /** An outcome that cannot be written at all. */
  error(err: unknown): void;
}

/**
 * The results of the completer's buffer whose write did not land: rows another
 * session held (the cycle skipped them) and outcomes Postgres refused. A refused
 * batch does not say which of its results was refused, so each goes out alone
 * (a suspect) until the one refused is found; that one is held and tried again
 * until it passes or its time is up. Their jobs stay the worker's meanwhile (ids()).
 */
export class RefusedResults {
  /** Results of a refused batch: they go out one per cycle, alone. */
  private suspects: Recorded[] = [];
  /**
   * Held results (each refused on its own already) due for another try: they go
   * out together, in one statement without a claim, whatever their number. One at
   * a time they took a round trip each every 250 ms, and with dozens held the
   * worker sent little else (outside review 42: a drain stalled for 30-60 s).
   */
  private heldDue: Recorded[] = [];
  private readonly locked = new LockedResults((results) => this.putBack(results));

  constructor(
    private readonly backoff: Required<BackoffOptions>,
    private readonly signals: RefusedResultsSignals,
  ) {}

  /** How many go out alone now. */
  get due(): number {
    return this.suspects.length + this.heldDue.length;
  }

  /** How many are not written yet, waiting or due. */
  get size(): number {
    return this.due + this.locked.size;
  }

  ids(): string[] {
    return [...this.suspects.map((r) => r.id), ...this.heldDue.map((r) => r.id), ...this.locked.ids()];
  }

  /** The next results to go out alone: one suspect, or every held one due. */
  takeAlone(): Recorded[] {
    const suspect = this.suspects.shift();
    return suspect ? [suspect] : this.heldDue.splice(0);
  }

  /** A batch Postgres refused: which result it refused is not known, so each goes alone. */
  suspect(results: readonly Recorded[]): void {
    this.suspects.push(...results);
  }

  /**
   * Results that went out alone, refused again. Each is held or given up by its
   * own clock; one whose time is up but that was refused beside others is tried
   * once alone first: it may be the others that are still refused (outside review
   * 44). Returns whether this is news (a first refusal, or a giving up).
   */
  refused(results: readonly Recorded[], err: unknown): boolean {
    let news = false;
    for (const result of results) {
      if (results.length > 1 && expired(result)) this.suspects.push(result);
      else news = this.refusedAlone(result, err) || news;
    }
    return news;
  }

  /** A result whose row another session held (see LockedResults.skipped). */
  skipped(result: Recorded, othersBack: Promise<void> | undefined): void {
    this.locked.skipped(result, othersBack);
  }

  /** Every result waiting for a held row goes back now. */
  releaseAll(): void {
    this.locked.releaseAll();
  }

  private refusedAlone(result: Recorded, err: unknown): boolean {
    // Held (its lock kept fresh) and tried again every SKIPPED_RETRY_MS, while the
    // worker goes on with the rest, in case what refused it passes (a trigger being
    // replaced); given up after 30 s (expired()).
    const news = result.firstRefusedAt === undefined;
    result.firstRefusedAt ??= Date.now();
    if (!expired(result)) {
      result.held = true;
      this.locked.defer(result);
      return news;
    }
    if (result.refused) {
      // Refused again with neither result, progress nor its own error text: nothing
      // more to strip. The job stays 'processing' for the rescuer (attempt counted).
      this.signals.error(
        new DatabaseError(`worker: the outcome of job ${result.id} cannot be written: ${describeRefusal(err)}`, undefined, {
          cause: err,
        }),
      );
      return false;
    }
    // This job's outcome alone becomes a failure of its attempt (see failureInPlaceOf).
    this.signals.back([failureInPlaceOf(result, err, this.backoff)]);
    return true;
  }

  /** Held ones go out alone, the rest with the next cycle. */
  private putBack(results: Recorded[]): void {
    const others: Recorded[] = [];
    for (const result of results) {
      if (result.held) this.heldDue.push(result);
      else others.push(result);
    }
    this.signals.back(others);
  }
}
