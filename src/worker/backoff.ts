export interface BackoffOptions {
  /** Delay before the first retry. */
  baseMs?: number;
  /** Upper bound of any delay. */
  maxMs?: number;
}

/**
 * Delay before the next attempt after `attempt` failed: exponential (base·2^(n-1)),
 * capped, with "equal jitter" — half fixed, half random — so retries of jobs that
 * failed together (an outage) spread out instead of returning as a wave, while
 * never retrying sooner than half the nominal delay.
 */
export function retryDelayMs(attempt: number, options: Required<BackoffOptions>, random = Math.random): number {
  const exponent = Math.min(Math.max(attempt - 1, 0), 52);
  const nominal = Math.min(options.maxMs, options.baseMs * 2 ** exponent);
  return Math.round(nominal / 2 + random() * (nominal / 2));
}
