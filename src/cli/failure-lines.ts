import type { FailureInfo, PartitionInfo } from '../outbox/relay-events.js';

/**
 * Which of a relay's failures `sluice relay` logs. A failure repeats at every
 * retry, so a partition's error is logged once, and again after that partition
 * published a batch (or when its error changes). Kept per partition: with one
 * last line for the whole relay, another destination's failures in between made
 * every retry a new line (outside review 95: the same line 4 times in a second).
 */
export class FailureLines {
  private readonly last = new Map<string, string>();

  /** True when this failure is worth a line. */
  shouldLog(failure: FailureInfo): boolean {
    const where = partitionOf(failure);
    if (this.last.get(where) === failure.error.message) return false;
    this.last.set(where, failure.error.message);
    return true;
  }

  /** True when the partition had a failure logged: it has recovered, and says so. */
  published(batch: PartitionInfo): boolean {
    return this.last.delete(partitionOf(batch));
  }
}

function partitionOf({ destination, partition }: PartitionInfo): string {
  return `${partition}:${destination}`;
}
