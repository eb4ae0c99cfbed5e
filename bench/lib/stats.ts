export interface Distribution {
  count: number;
  p50: number;
  p95: number;
  p99: number;
  max: number;
  mean: number;
}

/** Nearest-rank percentiles of `values` (milliseconds, or whatever unit they are in). */
export function distribution(values: number[]): Distribution {
  const sorted = [...values].sort((a, b) => a - b);
  const at = (p: number) => sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] ?? NaN;
  const sum = sorted.reduce((a, b) => a + b, 0);
  return {
    count: sorted.length,
    p50: at(50),
    p95: at(95),
    p99: at(99),
    max: sorted[sorted.length - 1] ?? NaN,
    mean: sorted.length ? sum / sorted.length : NaN,
  };
}

/** Jobs per second, rounded. */
export function rate(jobs: number, elapsedMs: number): number {
  return Math.round((jobs * 1000) / Math.max(elapsedMs, 1e-3));
}

export function median(values: number[]): number {
  return distribution(values).p50;
}
