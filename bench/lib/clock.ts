import { performance } from 'node:perf_hooks';

/**
 * Wall-clock milliseconds with sub-millisecond resolution. Built on the same
 * clock in every process of the machine, so a time taken in the benchmark and one
 * taken in a worker process can be subtracted (bench/worker-process.mjs uses the
 * same formula).
 */
export function now(): number {
  return performance.timeOrigin + performance.now();
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
}
