import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Queue } from '../../src/index.js';
import { startPgBouncer, type PgBouncer } from '../../tests/helpers/pgbouncer.js';
import { now, sleep } from '../lib/clock.js';
import { migratedSchema, type ScratchSchema } from '../lib/database.js';
import { BackendCpu, taggedUrl } from '../lib/postgres-cpu.js';
import { ClientProcess, WorkerGroup } from '../lib/processes.js';
import { distribution, rate, type Distribution } from '../lib/stats.js';
import { SLUICE, type System } from '../lib/systems.js';
import { busyCores, machineTicks, processCpuUs } from './cpu.js';
import { ConnectionMonitor, type ConnectionPeaks } from './monitor.js';
import type { WorkerFiles } from './worker-files.js';
import { claimsDelta, readWorkerFiles, type ClaimStats } from './worker-files.js';

/** Worker processes started alike. */
export interface WorkerSet {
  count: number;
  concurrency: number;
  /** A direct LISTEN connection each; false: poll only. */
  listen: boolean;
  /** Default: Sluice's (2 s). */
  pollIntervalMs?: number;
  /** completionFlushMs; default: Sluice's (10 ms). */
  flushMs?: number;
}

/** One arrangement of worker processes, measured in every phase with the same processes. */
export interface SessionSpec {
  name: string;
  sets: WorkerSet[];
}

export interface ScaleSizes {
  noopJobs: number;
  sleepJobs: number;
  sleepMs: number;
  latencyJobs: number;
  latencyIntervalMs: number;
  /** PgBouncer's default_pool_size: the server connections all workers share. */
  poolSize: number;
  /** A drain still running after this long is stopped and reported as such. */
  drainTimeoutMs: number;
}

export interface ScaleContext {
  /** The Postgres the workers use (directly for LISTEN, through PgBouncer for the rest). */
  url: string;
  sizes: ScaleSizes;
  log: (line: string) => void;
}

/** What a phase cost, per job, and the connections it held. */
interface PhaseCost {
  /** CPU of all worker processes, µs per job. */
  workerCpuUsPerJob: number;
  /** CPU of this benchmark's own process (progress messages, sampling), µs per job. */
  harnessCpuUsPerJob: number;
  /** CPU of the Postgres backends serving the workers (pool and LISTEN), µs per job; null: not local. */
  postgresCpuUsPerJob: number | null;
  pgbouncerCpuUsPerJob: number | null;
  /** The whole machine's busy CPU over the phase, in cores (2 = saturated here), other agents' load included. */
  busyCores: number | null;
  connections: ConnectionPeaks;
  claims: ClaimStats;
}

export interface DrainResult extends PhaseCost {
  task: string;
  jobs: number;
  completed: number;
  timedOut: boolean;
  /** First handler start → every completion written. */
  jobsPerSec: number;
  elapsedMs: number;
  /** Queue resumed → first handler start (poll-only workers hear of the resume on their next poll). */
  pickUpMs: number;
}

export interface LatencyResult extends PhaseCost {
  jobs: number;
  jobsSeen: number;
  /** Enqueue's COMMIT acknowledged → handler start, ms. */
  latencyMs: Distribution;
}

export interface SessionResult {
  name: string;
  processes: number;
  concurrency: number;
  listeners: number;
  poolSize: number;
  drains: DrainResult[];
  latency: LatencyResult;
  /** The largest peak RSS of one worker process. */
  maxRssBytes: number;
  /** The machine's load average (1 min) when the session started: other agents share it. */
  loadBefore: number;
}

/**
 * Each drain numbers its jobs in a block of its own from 10 × DRAIN_BLOCK, so they
 * never mix with the latency jobs' (from 0); see sluice-scaled.mjs.
 */
const DRAIN_BLOCK = 1e8;
const ADAPTER = fileURLToPath(new URL('./sluice-scaled.mjs', import.meta.url));

/**
 * One session: a PgBouncer of its own (transaction mode, `poolSize` server
 * connections), a fresh schema, the session's worker processes started with the
 * queue paused; then prefilled drains of no-op and of `sleepMs` jobs (each timed
 * from the resume of the queue), then enqueue → start latency with the workers
 * idle. Every process and the schema are gone when it returns.
 */
export async function runSession(ctx: ScaleContext, spec: SessionSpec): Promise<SessionResult> {
  const bouncer = await startPgBouncer(ctx.url, ctx.sizes.poolSize);
  const db = await migratedSchema(ctx.url, `scale_${spec.name}`);
  const queue = new Queue({ connectionString: ctx.url, schema: db.schema });
  const statsDir = await mkdtemp(join(tmpdir(), 'sluice-scale-'));
  const id = randomBytes(3).toString('hex');
  const tags = { pool: `sluice-scale-${id}`, listen: `sluice-scale-${id}-listen` };
  const groups: WorkerGroup[] = [];
  let monitor: ConnectionMonitor | undefined;
  const loadBefore = loadavg()[0]!;
  try {
    await queue.pauseQueue('default');
    monitor = await ConnectionMonitor.start(ctx.url, bouncer.adminUrl, tags);
    for (const set of spec.sets) {
      const system = scaledSystem(set, set.listen ? taggedUrl(ctx.url, tags.listen) : undefined, statsDir);
      groups.push(
        await WorkerGroup.start(system, set.count, {
          url: taggedUrl(bouncer.url, tags.pool),
          schema: db.schema,
          concurrency: set.concurrency,
        }),
      );
    }
    for (const group of groups) group.go();
    await allUp(monitor, spec);
    const session = new Session(ctx, db, queue, bouncer, monitor, groups, tags, statsDir);
    const drains = [
      await session.drain('noop', ctx.sizes.noopJobs, 0),
      await session.drain('sleep', ctx.sizes.sleepJobs, ctx.sizes.sleepMs),
    ];
    const latency = await session.latency();
    await stopAll(groups.splice(0), ctx.log);
    return {
      name: spec.name,
      processes: spec.sets.reduce((n, s) => n + s.count, 0),
      concurrency: spec.sets.reduce((n, s) => n + s.count * s.concurrency, 0),
      listeners: listenersOf(spec),
      poolSize: ctx.sizes.poolSize,
      drains,
      latency,
      maxRssBytes: (await readWorkerFiles(statsDir)).maxRssBytes,
      loadBefore,
    };
  } finally {
    await stopAll(groups, ctx.log);
    await monitor?.stop();
    await queue.close();
    await bouncer.stop();
    await db.drop();
    await rm(statsDir, { recursive: true, force: true });
  }
}

/**
 * Stops every worker process gracefully. What the benchmark needs of them is in
 * their files already; a stop whose report lost the race with the exit is logged.
 */
async function stopAll(groups: WorkerGroup[], log: (line: string) => void): Promise<void> {
  const stopped = await Promise.allSettled(groups.map((g) => g.stop()));
  for (const r of stopped) if (r.status === 'rejected') log(`  (${(r.reason as Error).message})`);
}

function listenersOf(spec: SessionSpec): number {
  return spec.sets.reduce((n, s) => n + (s.listen ? s.count : 0), 0);
}

function scaledSystem(set: WorkerSet, listenUrl: string | undefined, statsDir: string): System {
  return {
    ...SLUICE,
    label: 'Sluice behind PgBouncer',
    adapter: ADAPTER,
    variant: JSON.stringify({ listenUrl, pollIntervalMs: set.pollIntervalMs, flushMs: set.flushMs, statsDir }),
  };
}

/** Every worker has its LISTEN connection and its pool at PgBouncer; then a second to settle. */
async function allUp(monitor: ConnectionMonitor, spec: SessionSpec): Promise<void> {
  const processes = spec.sets.reduce((n, s) => n + s.count, 0);
  const deadline = Date.now() + 60_000;
  for (;;) {
    const seen = await monitor.now();
    if (seen.listen >= listenersOf(spec) && seen.bouncerClients >= processes) break;
    if (Date.now() > deadline) {
      throw new Error(`workers not up after 60 s: ${seen.listen} LISTEN connections, ${seen.bouncerClients} PgBouncer clients`);
    }
    await sleep(100);
  }
  await sleep(1_000);
}

/** Readings taken before a phase, to subtract. */
interface Baseline {
  completed: number;
  workerCpuUs: number;
  harnessCpu: NodeJS.CpuUsage;
  pgbouncerCpuUs: number | null;
  machine: ReturnType<typeof machineTicks>;
  claims: ClaimStats;
  postgres: BackendCpu[];
}

class Session {
  constructor(
    private readonly ctx: ScaleContext,
    private readonly db: ScratchSchema,
    private readonly queue: Queue,
    private readonly bouncer: PgBouncer,
    private readonly monitor: ConnectionMonitor,
    private readonly groups: WorkerGroup[],
    private readonly tags: { pool: string; listen: string },
    private readonly statsDir: string,
  ) {}

  private get completed(): number {
    return this.groups.reduce((n, g) => n + g.totalCompleted, 0);
  }

  /** Prefills `jobs` jobs while the queue is paused, resumes it, waits until all are written. */
  async drain(task: 'noop' | 'sleep', jobs: number, ms: number): Promise<DrainResult> {
    const { ctx, db, queue } = this;
    const block = task === 'noop' ? 10 : 11;
    const first = block * DRAIN_BLOCK;
    for (let from = 0; from < jobs; from += 5_000) {
      const batch = Array.from({ length: Math.min(5_000, jobs - from) }, (_, k) => ({
        task,
        payload: { i: first + from + k, ms },
      }));
      await queue.enqueueMany(batch);
    }
    await db.pool.query(`ANALYZE ${db.s}.jobs`);
    const base = await this.baseline();
    const resumedAt = now();
    await queue.resumeQueue('default');
    const written = await this.drained(base.completed + jobs, resumedAt + ctx.sizes.drainTimeoutMs);
    const endedAt = written ?? now();
    const cost = await this.cost(base, jobs);
    const unfinished = await this.unfinished();
    await queue.pauseQueue('default');
    // Left over from a drain that timed out: not the next phase's.
    await db.pool.query(`DELETE FROM ${db.s}.jobs WHERE status <> 'completed'`);
    const completed = jobs - unfinished;
    const from = cost.files.firstStarts.get(block) ?? resumedAt;
    ctx.log(
      `  drain ${jobs} ${task === 'noop' ? 'no-op' : `${ms} ms`} jobs: ${completed} done in ${((endedAt - resumedAt) / 1000).toFixed(1)} s`,
    );
    return {
      task: task === 'noop' ? 'no-op' : `${ms} ms`,
      jobs,
      completed,
      timedOut: written === null,
      jobsPerSec: rate(completed, endedAt - from),
      elapsedMs: endedAt - from,
      pickUpMs: from - resumedAt,
      ...cost.phase,
    };
  }

  /** Idle workers; one enqueue every latencyIntervalMs from a client process (direct connection). */
  async latency(): Promise<LatencyResult> {
    const { ctx, db } = this;
    const { latencyJobs: jobs, latencyIntervalMs } = ctx.sizes;
    await this.queue.resumeQueue('default');
    const client = await ClientProcess.start(SLUICE, { url: taggedUrl(ctx.url, 'sluice-scale-client'), schema: db.schema });
    try {
      // The resume reaches poll-only workers on their next poll: let every worker go idle first.
      await sleep(3_000);
      const base = await this.baseline();
      const committed = await client.latency(jobs, latencyIntervalMs);
      await this.drained(base.completed + jobs, now() + 10_000);
      const cost = await this.cost(base, jobs);
      const starts = cost.files.latencyStarts;
      const latencies = committed.map((at, i) => (starts.has(i) ? starts.get(i)! - at : Infinity));
      const seen = latencies.filter(Number.isFinite).length;
      ctx.log(`  latency: ${seen} of ${jobs} jobs started`);
      return { jobs, jobsSeen: seen, latencyMs: distribution(latencies), ...cost.phase };
    } finally {
      await client.close();
    }
  }

  private async baseline(): Promise<Baseline> {
    // Let the workers' last stats files and progress reports of the previous phase land.
    await sleep(500);
    this.monitor.reset();
    return {
      completed: this.completed,
      workerCpuUs: this.groups.reduce((n, g) => n + g.cpuUs, 0),
      harnessCpu: process.cpuUsage(),
      pgbouncerCpuUs: processCpuUs(this.bouncer.pid),
      machine: machineTicks(),
      claims: (await readWorkerFiles(this.statsDir)).claims,
      postgres: await Promise.all([
        BackendCpu.start(this.db.pool, this.tags.pool),
        BackendCpu.start(this.db.pool, this.tags.listen),
      ]),
    };
  }

  private async cost(base: Baseline, jobs: number): Promise<{ phase: PhaseCost; files: WorkerFiles }> {
    const machine = machineTicks();
    const harness = process.cpuUsage(base.harnessCpu);
    const pgbouncerCpuUs = processCpuUs(this.bouncer.pid);
    const postgres = await Promise.all(base.postgres.map((cpu) => cpu.stop()));
    const connections = this.monitor.reset();
    // Progress reports (with CPU) come every 5 ms, the stats files every 250 ms.
    await sleep(500);
    const perJob = (us: number | null) => (us === null ? null : us / jobs);
    const files = await readWorkerFiles(this.statsDir);
    const phase: PhaseCost = {
      workerCpuUsPerJob: (this.groups.reduce((n, g) => n + g.cpuUs, 0) - base.workerCpuUs) / jobs,
      harnessCpuUsPerJob: (harness.user + harness.system) / jobs,
      postgresCpuUsPerJob: postgres.includes(null) ? null : perJob(postgres.reduce((a, b) => a! + b!, 0)),
      pgbouncerCpuUsPerJob:
        pgbouncerCpuUs === null || base.pgbouncerCpuUs === null ? null : perJob(pgbouncerCpuUs - base.pgbouncerCpuUs),
      busyCores: busyCores(base.machine, machine),
      connections,
      claims: claimsDelta(base.claims, files.claims),
    };
    return { phase, files };
  }

  private unfinished(): Promise<number> {
    return this.db.count(`SELECT count(*)::int AS n FROM ${this.db.s}.jobs WHERE status <> 'completed'`);
  }

  /**
   * When the jobs table showed every completion written (the time that query was
   * sent), or null past `deadline`. The workers' counts (passed on every 100 ms)
   * say when to look closely; the table is also read every 250 ms regardless, so a
   * count that never arrives cannot stall the run.
   */
  private async drained(target: number, deadline: number): Promise<number | null> {
    const nearly = target - Math.max(1, Math.floor((target - this.completed) / 20));
    let lastLog = now();
    for (let n = 1; ; n++) {
      if (this.completed >= nearly || n % 50 === 0) {
        const sent = now();
        if ((await this.unfinished()) === 0) return sent;
      }
      if (now() > deadline) return null;
      if (now() - lastLog > 10_000) {
        lastLog = now();
        this.ctx.log(`    ... ${this.completed} jobs counted, ${await this.unfinished()} unfinished in the table`);
      }
      await sleep(5);
    }
  }
}
