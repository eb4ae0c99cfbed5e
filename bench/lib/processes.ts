import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { now } from './clock.js';
import type { System } from './systems.js';

const SCRIPT = fileURLToPath(new URL('../systems/process.mjs', import.meta.url));

/** Where a system's processes connect, and as what. */
export interface ProcessTarget {
  url: string;
  schema: string;
}

function spawn(system: System, role: 'worker' | 'client', options: Record<string, unknown>): ChildProcess {
  return fork(SCRIPT, [], {
    execPath: system.execPath,
    env: { ...process.env, BENCH_PROCESS: JSON.stringify({ adapter: system.adapter, variant: system.variant, role, ...options }) },
    // BENCH_WORKER_ARGV: Node flags for the system's processes, e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof"
    // (NODE_OPTIONS does not take --cpu-prof).
    execArgv: process.env.BENCH_WORKER_ARGV ? process.env.BENCH_WORKER_ARGV.split(' ') : [],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
}

function whenReady(child: ChildProcess, what: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const onExit = (code: number | null) => reject(new Error(`${what} exited (${code}) before it was ready`));
    child.once('exit', onExit);
    child.on('message', (msg: { type: string }) => {
      if (msg.type !== 'ready') return;
      child.off('exit', onExit);
      resolve();
    });
  });
}

export interface WorkerOptions extends ProcessTarget {
  concurrency: number;
  /** Record when each handler started (payload `{ i }`), for latency. */
  recordStarts?: boolean;
}

export interface WorkerReport {
  completed: number;
  /** Job number → time its handler started (bench/lib/clock.ts `now()`). */
  starts: Map<number, number>;
  /** The worker's own counters, when the system has them (Sluice: its fetch-loop stats). */
  stats: Record<string, number> | null;
  /** CPU time (user + system) of the process from `go` to `stop`, in µs. */
  cpuUs: number;
  maxRssBytes: number;
}

type WorkerMessage =
  | { type: 'ready' }
  | { type: 'progress'; completed: number; at: number; cpuUs: number }
  | { type: 'stopped'; completed: number; starts: number[]; stats: Record<string, number> | null; cpuUs: number; maxRssBytes: number };

/**
 * Worker processes of one system (bench/systems/process.mjs) started together.
 * `go()` lets them work; `whenCompleted(n)` resolves at the time the n-th job (over
 * all of them) was reported completed; `stop()` stops them gracefully and collects
 * reports.
 */
export class WorkerGroup {
  private readonly completed: number[];
  private readonly cpu: number[];
  private waiters: { target: number; resolve: (at: number) => void }[] = [];

  private constructor(private readonly children: ChildProcess[]) {
    this.completed = children.map(() => 0);
    this.cpu = children.map(() => 0);
    children.forEach((child, i) => child.on('message', (msg: WorkerMessage) => {
      if (msg.type !== 'progress') return;
      this.completed[i] = msg.completed;
      this.cpu[i] = msg.cpuUs;
      const total = this.totalCompleted;
      this.waiters = this.waiters.filter((w) => {
        if (total < w.target) return true;
        w.resolve(msg.at);
        return false;
      });
    }));
  }

  static async start(system: System, count: number, options: WorkerOptions): Promise<WorkerGroup> {
    const children = Array.from({ length: count }, () => spawn(system, 'worker', { ...options }));
    await Promise.all(children.map((child) => whenReady(child, `${system.label} worker`)));
    return new WorkerGroup(children);
  }

  get totalCompleted(): number {
    return this.completed.reduce((a, b) => a + b, 0);
  }

  /** CPU time of all the workers since `go`, as of their last progress report, in µs. */
  get cpuUs(): number {
    return this.cpu.reduce((a, b) => a + b, 0);
  }

  go(): void {
    for (const child of this.children) child.send({ type: 'go' });
  }

  /** Resolves with the time at which `target` jobs had completed in total. */
  whenCompleted(target: number): Promise<number> {
    return new Promise((resolve) => {
      if (this.totalCompleted >= target) resolve(now());
      else this.waiters.push({ target, resolve });
    });
  }

  async stop(): Promise<WorkerReport[]> {
    return Promise.all(this.children.map((child) => new Promise<WorkerReport>((resolve, reject) => {
      child.once('exit', (code) => reject(new Error(`bench worker exited (${code}) without a report`)));
      child.on('message', (msg: WorkerMessage) => {
        if (msg.type !== 'stopped') return;
        const starts = new Map<number, number>();
        for (let i = 0; i + 1 < msg.starts.length; i += 2) starts.set(msg.starts[i]!, msg.starts[i + 1]!);
        resolve({ completed: msg.completed, starts, stats: msg.stats, cpuUs: msg.cpuUs, maxRssBytes: msg.maxRssBytes });
      });
      child.send({ type: 'stop' });
    })));
  }
}

/** Sums the counters several workers reported (null when the system has none). */
export function sumStats(reports: WorkerReport[]): Record<string, number> | null {
  if (reports.some((r) => !r.stats)) return null;
  const total: Record<string, number> = {};
  for (const r of reports) {
    for (const [key, value] of Object.entries(r.stats!)) total[key] = (total[key] ?? 0) + value;
  }
  return total;
}

/** What the client process reports for a timed loop of enqueues. */
export interface Timed {
  jobs: number;
  elapsedMs: number;
}

type ClientMessage = { type: 'ready' } | { type: 'result'; id: number; value: unknown } | { type: 'error'; id: number; message: string };

/**
 * An enqueuing client of one system in its own process (bench/systems/process.mjs):
 * the enqueue loops run there, on the system's own API, so no IPC sits between
 * two enqueues.
 */
export class ClientProcess {
  private nextId = 0;
  private closed = false;
  private readonly calls = new Map<number, { resolve(value: unknown): void; reject(err: Error): void }>();

  private constructor(private readonly child: ChildProcess, label: string) {
    child.on('message', (msg: ClientMessage) => {
      if (msg.type === 'ready') return;
      const call = this.calls.get(msg.id);
      this.calls.delete(msg.id);
      if (msg.type === 'result') call?.resolve(msg.value);
      else call?.reject(new Error(`${label} client: ${msg.message}`));
    });
    child.on('exit', (code) => {
      for (const call of this.calls.values()) call.reject(new Error(`${label} client exited (${code})`));
      this.calls.clear();
    });
  }

  static async start(system: System, target: ProcessTarget): Promise<ClientProcess> {
    const child = spawn(system, 'client', { ...target });
    await whenReady(child, `${system.label} client`);
    return new ClientProcess(child, system.label);
  }

  /** Creates the system's tables in the target schema. */
  install(): Promise<void> {
    return this.call('install') as Promise<void>;
  }

  /** `count` pending no-op jobs, payload `{ i }` from 0 (not timed). */
  prefill(count: number): Promise<void> {
    return this.call('prefill', count, 5_000) as Promise<void>;
  }

  /** Single enqueues from `callers` concurrent loops for `durationMs`. */
  single(callers: number, durationMs: number): Promise<Timed> {
    return this.call('single', callers, durationMs) as Promise<Timed>;
  }

  /** `total` jobs in batches of `batch`. */
  bulk(batch: number, total: number): Promise<Timed> {
    return this.call('bulk', batch, total) as Promise<Timed>;
  }

  /** Untimed: `rounds` of `callers` concurrent enqueues (negative payload indexes); how many. */
  warm(rounds: number, callers: number): Promise<number> {
    return this.call('warm', rounds, callers) as Promise<number>;
  }

  /** One enqueue every `intervalMs`; when each one's COMMIT was acknowledged. */
  latency(jobs: number, intervalMs: number): Promise<number[]> {
    return this.call('latency', jobs, intervalMs) as Promise<number[]>;
  }

  /** Closes the system's client and ends the process; once. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    try {
      await this.call('close');
    } finally {
      this.child.kill();
    }
  }

  private call(op: string, ...args: unknown[]): Promise<unknown> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.calls.set(id, { resolve, reject });
      this.child.send({ type: 'call', id, op, args });
    });
  }
}
