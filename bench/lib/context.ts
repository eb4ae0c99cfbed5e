/** Sizes of one benchmark run: the full suite, or `--quick` for a smoke test. */
export interface BenchSizes {
  /**
   * Repetitions of every scenario; tables show medians. Systems take turns within
   * each repetition, so drift on a shared machine hits all of them.
   */
  reps: number;
  enqueueCallers: number;
  enqueueDurationMs: number;
  bulkBatch: number;
  bulkTotal: number;
  drainSizes: number[];
  drainConcurrency: number[];
  /**
   * A drain that has not finished after max(drainTimeoutMs, size / drainMinRate
   * seconds) is stopped and reported as the rate of what it drained (pg-boss at its
   * defaults polls every 2 s); if it drained less than half, it is not repeated and
   * larger drains at that concurrency are skipped.
   */
  drainTimeoutMs: number;
  drainMinRate: number;
  sqlClients: number;
  sqlBatch: number;
  latencyJobs: number;
  latencyIntervalMs: number;
  latencyWorkers: number;
  latencyConcurrency: number;
  /** How long after the last enqueue jobs not yet started are waited for (then counted as never). */
  latencyGraceMs: number;
  steadyLoops: number;
  steadyDurationMs: number;
  steadyWorkers: number;
  steadyConcurrency: number;
}

export const FULL: BenchSizes = {
  reps: 3,
  enqueueCallers: 10,
  enqueueDurationMs: 5_000,
  bulkBatch: 1_000,
  bulkTotal: 100_000,
  drainSizes: [10_000, 100_000],
  drainConcurrency: [10, 100],
  drainTimeoutMs: 60_000,
  drainMinRate: 1_000,
  sqlClients: 10,
  sqlBatch: 100,
  latencyJobs: 2_000,
  latencyIntervalMs: 5,
  latencyWorkers: 2,
  latencyConcurrency: 10,
  latencyGraceMs: 10_000,
  steadyLoops: 10,
  steadyDurationMs: 15_000,
  steadyWorkers: 2,
  steadyConcurrency: 50,
};

export const QUICK: BenchSizes = {
  ...FULL,
  reps: 1,
  enqueueDurationMs: 300,
  bulkTotal: 3_000,
  drainSizes: [1_000],
  latencyJobs: 60,
  steadyDurationMs: 1_500,
  drainTimeoutMs: 10_000,
  latencyGraceMs: 5_000,
};

export interface BenchContext {
  url: string;
  sizes: BenchSizes;
  log(line: string): void;
}

/** One line of the results table. */
export interface Row {
  scenario: string;
  metric: string;
  value: number;
  unit: string;
  /** A jobs/s figure: also shown as a share of the SQL-only limit measured at this many jobs. */
  vsLimitAt?: number;
}

export interface ScenarioResult {
  rows: Row[];
  /** Everything measured, for the JSON file. */
  details: Record<string, unknown>;
}
