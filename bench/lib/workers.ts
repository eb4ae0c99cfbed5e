import { fork, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { WorkerStats } from '../../src/index.js';

const SCRIPT = fileURLToPath(new URL('../worker-process.mjs', import.meta.url));
const DIST = fileURLToPath(new URL('../../dist/index.js', import.meta.url));

export interface WorkerProcessOptions {
  url: string;
  schema: string;
  concurrency: number;
  batchSize?: number;
  prefetch?: number;
  completionFlushMs?: number;
  pollIntervalMs?: number;
  /** Record when each handler started (payload `{ i }`), for latency. */
  recordStarts?: boolean;
}

export interface WorkerReport {
  completed: number;
  /** Job number → time its handler started (bench/lib/clock.ts `now()`). */
  starts: Map<number, number>;
  stats: WorkerStats;
  maxRssBytes: number;
}

type Message =
  | { type: 'ready' }
  | { type: 'progress'; completed: number; at: number }
  | { type: 'stopped'; completed: number; starts: number[]; stats: WorkerStats; maxRssBytes: number };

/**
 * Worker processes (bench/worker-process.mjs) started together. `go()` lets them
 * claim; `whenCompleted(n)` resolves at the time the n-th job (over all of them)
 * was recorded completed; `stop()` stops them gracefully and collects reports.
 */
export class WorkerGroup {
  private readonly completed: number[];
  private waiters: { target: number; resolve: (at: number) => void }[] = [];

  private constructor(private readonly children: ChildProcess[]) {
    this.completed = children.map(() => 0);
    children.forEach((child, i) => child.on('message', (msg: Message) => {
      if (msg.type !== 'progress') return;
      this.completed[i] = msg.completed;
      const total = this.totalCompleted;
      this.waiters = this.waiters.filter((w) => {
        if (total < w.target) return true;
        w.resolve(msg.at);
        return false;
      });
    }));
  }

  static async start(count: number, options: WorkerProcessOptions): Promise<WorkerGroup> {
    if (!existsSync(DIST)) throw new Error('dist/index.js is missing: run `npm run build` first (npm run bench does)');
    const children = Array.from({ length: count }, () => fork(SCRIPT, [], {
      env: { ...process.env, BENCH_WORKER: JSON.stringify(options) },
      execArgv: [],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    }));
    await Promise.all(children.map((child) => new Promise<void>((resolve, reject) => {
      const onExit = (code: number | null) => reject(new Error(`bench worker exited (${code}) before it was ready`));
      child.once('exit', onExit);
      child.on('message', (msg: Message) => {
        if (msg.type !== 'ready') return;
        child.off('exit', onExit);
        resolve();
      });
    })));
    return new WorkerGroup(children);
  }

  get totalCompleted(): number {
    return this.completed.reduce((a, b) => a + b, 0);
  }

  go(): void {
    for (const child of this.children) child.send({ type: 'go' });
  }

  /** Resolves with the time at which `target` jobs had completed in total. */
  whenCompleted(target: number): Promise<number> {
    return new Promise((resolve) => {
      this.waiters.push({ target, resolve });
    });
  }

  async stop(): Promise<WorkerReport[]> {
    return Promise.all(this.children.map((child) => new Promise<WorkerReport>((resolve, reject) => {
      child.once('exit', (code) => reject(new Error(`bench worker exited (${code}) without a report`)));
      child.on('message', (msg: Message) => {
        if (msg.type !== 'stopped') return;
        const starts = new Map<number, number>();
        for (let i = 0; i + 1 < msg.starts.length; i += 2) starts.set(msg.starts[i]!, msg.starts[i + 1]!);
        resolve({ completed: msg.completed, starts, stats: msg.stats, maxRssBytes: msg.maxRssBytes });
      });
      child.send({ type: 'stop' });
    })));
  }
}

/** Sums the fetch-loop counters of several workers. */
export function sumStats(reports: WorkerReport[]): WorkerStats {
  const total: WorkerStats = { cycles: 0, claims: 0, emptyClaims: 0, claimed: 0 };
  for (const r of reports) {
    for (const key of Object.keys(total) as (keyof WorkerStats)[]) total[key] += r.stats[key];
  }
  return total;
}
