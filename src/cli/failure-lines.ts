import type { FailureInfo, PartitionInfo } from '../outbox/relay-events.js';

/**
 * Which of a relay's failures and errors `sluice relay` logs. A failure repeats
 * at every retry, so a partition's error is logged once, and again after that
 * partition published a batch (or when its error changes). Kept per partition:
 * with one last line for the whole relay, another destination's failures in
 * between made every retry a new line (outside review 95: the same line 4 times
 * in a second).
 */
export class FailureLines {
  private readonly last = new Map<string, string>();
  /** The relay's errors logged since it last got through to Postgres. */
  private readonly errors = new Set<string>();

  /** True when this failure is worth a line. */
  shouldLog(failure: FailureInfo): boolean {
    const where = partitionOf(failure);
    if (this.last.get(where) === failure.error.message) return false;
    this.last.set(where, failure.error.message);
    return true;
  }

  published(batch: PartitionInfo): void {
    this.last.delete(partitionOf(batch));
  }

  /**
   * True for an error (Postgres unreachable, ...) not logged since the relay last
   * got through: every partition's loop and the clean-up report each retry, about
   * ten lines per outage before (outside review 96).
   */
  shouldLogError(err: Error): boolean {
    if (this.errors.has(err.message)) return false;
    this.errors.add(err.message);
    return true;
  }

  /** A pass went through: true when errors were logged since, so the relay has recovered. */
  wentThrough(): boolean {
    if (this.errors.size === 0) return false;
    this.errors.clear();
    return true;
  }
}

function partitionOf({ destination, partition }: PartitionInfo): string {
  return `${partition}:${destination}`;
}
