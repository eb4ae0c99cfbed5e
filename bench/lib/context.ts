/** Sizes of one benchmark run: the full suite, or `--quick` for a smoke test. */
export interface BenchSizes {
  enqueueCallers: number;
  enqueueDurationMs: number;
  /** Single-enqueue rounds, alternating bare INSERT and Sluice, so drift hits both. */
  enqueueRounds: number;
  bulkBatch: number;
  bulkTotal: number;
  drainSizes: number[];
  drainConcurrency: number[];
  sqlClients: number;
  sqlBatch: number;
  latencyJobs: number;
  latencyIntervalMs: number;
  latencyWorkers: number;
  latencyConcurrency: number;
  steadyLoops: number;
  steadyDurationMs: number;
  steadyWorkers: number;
  steadyConcurrency: number;
}

export const FULL: BenchSizes = {
  enqueueCallers: 10,
  enqueueDurationMs: 5_000,
  enqueueRounds: 2,
  bulkBatch: 1_000,
  bulkTotal: 100_000,
  drainSizes: [10_000, 100_000],
  drainConcurrency: [10, 100],
  sqlClients: 10,
  sqlBatch: 100,
  latencyJobs: 2_000,
  latencyIntervalMs: 5,
  latencyWorkers: 2,
  latencyConcurrency: 10,
  steadyLoops: 10,
  steadyDurationMs: 15_000,
  steadyWorkers: 2,
  steadyConcurrency: 50,
};

export const QUICK: BenchSizes = {
  ...FULL,
  enqueueDurationMs: 300,
  enqueueRounds: 1,
  bulkTotal: 3_000,
  drainSizes: [1_000],
  latencyJobs: 60,
  steadyDurationMs: 1_500,
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
