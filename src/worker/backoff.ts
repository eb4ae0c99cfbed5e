import { ValidationError } from '../errors.js';

/** How the retry delay grows with the attempt number. */
export type BackoffShape = 'exponential' | 'linear' | 'fixed';

export interface BackoffOptions {
  /** Delay before the first retry. */
  baseMs?: number | undefined;
  /** Upper bound of any delay. */
  maxMs?: number | undefined;
  /** exponential: base·2^(n−1) (default); linear: base·n; fixed: base every time. */
  shape?: BackoffShape | undefined;
}

export const BACKOFF_SHAPES: readonly BackoffShape[] = ['exponential', 'linear', 'fixed'];

/**
 * Delay before the next attempt after `attempt` failed: by `shape`, capped at
 * `maxMs`, with "equal jitter" — half fixed, half random — so retries of jobs that
 * failed together (an outage) spread out instead of returning as a wave, while
 * never retrying sooner than half the nominal delay.
 */
export function retryDelayMs(
  attempt: number,
  options: Required<Omit<BackoffOptions, 'shape'>> & Pick<BackoffOptions, 'shape'>,
  random = Math.random,
): number {
  // Exported for users' own schedules: a NaN here would become a NaN run_at.
  if (!Number.isFinite(attempt)) throw new ValidationError(`attempt must be a finite number, got ${String(attempt)}`);
  for (const key of ['baseMs', 'maxMs'] as const) {
    const value: unknown = options[key];
    if (typeof value !== 'number' || !Number.isFinite(value) || value < 0)
      throw new ValidationError(`${key} must be a finite number ≥ 0, got ${String(value)}`);
  }
  const n = Math.max(attempt, 1);
  const growth = options.shape === 'fixed' ? 1 : options.shape === 'linear' ? n : 2 ** Math.min(n - 1, 52);
  const nominal = Math.min(options.maxMs, options.baseMs * growth);
  return Math.round(nominal / 2 + random() * (nominal / 2));
}
