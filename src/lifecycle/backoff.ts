export interface BackoffOptions {
  /** First delay. */
  minMs: number;
  /** Largest delay. */
  maxMs: number;
}

/**
 * Delays between attempts of a background loop that keeps failing (a lost
 * connection, a failing statement): doubling from minMs up to maxMs, each with
 * "equal jitter" (between half and all of the nominal delay) so that workers that
 * failed together do not come back together. reset() after a success.
 */
export class Backoff {
  private failures = 0;

  constructor(
    private readonly options: BackoffOptions,
    private readonly random: () => number = Math.random,
  ) {}

  /** The delay before the next attempt; each call counts one more failure. */
  next(): number {
    const nominal = Math.min(this.options.maxMs, this.options.minMs * 2 ** Math.min(this.failures++, 30));
    return nominal * (0.5 + this.random() / 2);
  }

  reset(): void {
    this.failures = 0;
  }
}
