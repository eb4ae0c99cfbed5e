/**
 * The chaos run: worker processes drain a queue on a private embedded Postgres
 * while faults are injected (SIGKILL of a worker process, pg_terminate_backend of
 * every worker connection, a restart of Postgres itself); afterwards the run
 * table is checked: every job completed, no overlapping runs of one job, and a
 * job ran more than once only when the worker of its earlier run was killed.
 *
 * Used by `npm run chaos` (bench/chaos.ts, 50,000 jobs) and, smaller, by
 * tests/chaos.test.ts. It never touches any server but the one it starts.
 */
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { migrate, Queue } from '../../src/index.js';
import { quoteSchema } from '../../src/db/identifiers.js';
import type { EmbeddedPostgres } from '../../src/dev/embedded-postgres.js';
import { startPrivatePostgres } from '../../tests/helpers/private-postgres.js';
import { spawnWorker, type WorkerProcess } from '../../tests/helpers/processes.js';

const WORKER_SCRIPT = fileURLToPath(new URL('./chaos-worker.ts', import.meta.url));
const SCHEMA = 'chaos';

export type FaultKind = 'kill' | 'terminate' | 'restart';

export interface ChaosOptions {
  jobs: number;
  workers: number;
  concurrency: number;
  /** How many faults of each kind to inject, spread over the run by progress. */
  faults: Record<FaultKind, number>;
  visibilityTimeoutMs: number;
  /** Give up (a violation) when the queue has not drained after this long. */
  timeoutMs: number;
  log?: (line: string) => void;
}

export interface ChaosReport {
  jobs: number;
  completed: number;
  /** Jobs not `completed` at the end. */
  lost: number;
  /** Faults actually injected, by kind. */
  faults: Record<FaultKind, number>;
  /** Handler runs recorded, and how many of them were re-runs of a job that had already run. */
  runs: number;
  reruns: number;
  /** Runs cut short by a SIGKILL (started, never ended). */
  killedMidRun: number;
  /** Runs that finished on a worker SIGKILLed before it wrote the result, then ran again. */
  killedBeforeResult: number;
  /** Claims that never reached a handler (the reply was lost with a killed connection). */
  unstartedClaims: number;
  violations: string[];
  seconds: number;
}

interface Slot {
  name: string;
  proc: WorkerProcess;
  /** Set before the driver kills or stops it: any other exit is a violation. */
  expectedExit: boolean;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

export async function runChaos(options: ChaosOptions): Promise<ChaosReport> {
  const log = options.log ?? (() => {});
  const server = await startPrivatePostgres('chaos');
  const pool = new pg.Pool({ connectionString: server.url, max: 4, application_name: 'chaos-driver' });
  pool.on('error', () => {});
  const run = new ChaosRun(options, server, pool, log);
  try {
    return await run.execute();
  } finally {
    await run.killAll();
    await pool.end().catch(() => {});
    await server.stop();
  }
}

class ChaosRun {
  private readonly s = quoteSchema(SCHEMA);
  private readonly slots = new Map<number, Slot>();
  private readonly respawns = new Set<Promise<void>>();
  private readonly violations: string[] = [];
  private readonly injected: Record<FaultKind, number> = { kill: 0, terminate: 0, restart: 0 };
  private generation = 0;

  constructor(
    private readonly options: ChaosOptions,
    private readonly server: EmbeddedPostgres,
    private readonly pool: pg.Pool,
    private readonly log: (line: string) => void,
  ) {}

  async execute(): Promise<ChaosReport> {
    const { jobs } = this.options;
    await migrate({ connectionString: this.server.url, schema: SCHEMA });
    await this.pool.query(`CREATE TABLE ${this.s}.runs (
      job_id bigint NOT NULL, attempt int NOT NULL, worker text NOT NULL,
      started_at timestamptz NOT NULL DEFAULT clock_timestamp(), ended_at timestamptz,
      PRIMARY KEY (job_id, attempt, worker))`);
    // When each killed worker was certainly dead (written after its exit), by the server clock.
    await this.pool.query(`CREATE TABLE ${this.s}.kills (worker text PRIMARY KEY, at timestamptz NOT NULL)`);
    const queue = new Queue({ pool: this.pool, schema: SCHEMA });
    for (let i = 0; i < jobs; i += 5_000) {
      const n = Math.min(5_000, jobs - i);
      // Plenty of attempts: claims lost with a killed connection spend one each.
      await queue.enqueueMany(Array.from({ length: n }, (_, k) => ({ task: 'chaos', payload: { n: i + k }, maxAttempts: 100 })));
    }
    this.log(`enqueued ${jobs} jobs; starting ${this.options.workers} worker processes`);

    const started = Date.now();
    await Promise.all(Array.from({ length: this.options.workers }, (_, slot) => this.spawn(slot)));
    const plan = shuffle(
      (Object.entries(this.options.faults) as [FaultKind, number][]).flatMap(([kind, n]) => Array<FaultKind>(n).fill(kind)),
    );
    let next = 0;
    let lastProgress = Date.now();
    for (;;) {
      const completed = await this.completedCount();
      if (completed === jobs) break;
      if (Date.now() - lastProgress >= 5_000) {
        lastProgress = Date.now();
        this.log(`${((Date.now() - started) / 1_000).toFixed(0)} s: ${completed ?? '?'} of ${jobs} completed`);
      }
      if (Date.now() - started > this.options.timeoutMs) {
        this.violations.push(`the queue did not drain within ${this.options.timeoutMs} ms (${completed ?? '?'} of ${jobs} completed)`);
        break;
      }
      // Fault i fires once (i+1)/(faults+1) of the jobs are done, so every fault lands mid-run.
      if (next < plan.length && completed !== undefined && completed >= (jobs * (next + 1)) / (plan.length + 1)) {
        await this.inject(plan[next++]!, completed);
        continue;
      }
      await sleep(50);
    }
    const seconds = (Date.now() - started) / 1_000;
    if (next < plan.length) this.violations.push(`the queue drained before all faults were injected (${next} of ${plan.length})`);
    await Promise.all(this.respawns);
    await this.stopAll();
    return this.verify(seconds);
  }

  private async spawn(slot: number): Promise<void> {
    const name = `w${slot}.${++this.generation}`;
    const proc = await spawnWorker({
      DATABASE_URL: this.server.url,
      SLUICE_SCHEMA: SCHEMA,
      WORKER_NAME: name,
      CONCURRENCY: String(this.options.concurrency),
      VISIBILITY_MS: String(this.options.visibilityTimeoutMs),
    }, WORKER_SCRIPT);
    const entry: Slot = { name, proc, expectedExit: false };
    this.slots.set(slot, entry);
    void proc.exited.then((code) => {
      if (!entry.expectedExit) {
        this.violations.push(`worker ${name} exited by itself (${code}):\n${proc.output().slice(-2_000)}`);
      }
    });
  }

  private async inject(kind: FaultKind, completed: number): Promise<void> {
    this.injected[kind]++;
    if (kind === 'kill') {
      const live = [...this.slots.entries()].filter(([, s]) => !s.expectedExit);
      const [slot, victim] = live[Math.floor(Math.random() * live.length)]!;
      victim.expectedExit = true;
      victim.proc.child.kill('SIGKILL');
      await victim.proc.exited;
      await this.retry(() => this.pool.query(`INSERT INTO ${this.s}.kills (worker, at) VALUES ($1, clock_timestamp())`, [victim.name]));
      this.log(`[${completed}] SIGKILL ${victim.name}; restarting slot ${slot}`);
      // The replacement starts in the background; the run goes on meanwhile.
      const respawn = this.spawn(slot).finally(() => this.respawns.delete(respawn));
      this.respawns.add(respawn);
    } else if (kind === 'terminate') {
      const { rows } = await this.retry(() => this.pool.query<{ n: number }>(
        `SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity
         WHERE application_name IN ('sluice-worker', 'sluice-listen') AND pid <> pg_backend_pid()`));
      this.log(`[${completed}] pg_terminate_backend: ${rows[0]!.n} worker connections`);
    } else {
      const t = Date.now();
      // Down long enough for claims, heartbeats, results and reconnects to fail a few times.
      await this.server.restart(() => sleep(500 + Math.random() * 2_000));
      this.log(`[${completed}] restarted Postgres (down ${Date.now() - t} ms)`);
    }
  }

  private async completedCount(): Promise<number | undefined> {
    try {
      const { rows } = await this.pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${this.s}.jobs WHERE status = 'completed'`);
      return rows[0]!.n;
    } catch {
      return undefined; // Postgres is restarting
    }
  }

  private async retry<T>(fn: () => Promise<T>): Promise<T> {
    for (let i = 0; ; i++) {
      try {
        return await fn();
      } catch (err) {
        if (i >= 100) throw err;
        await sleep(100);
      }
    }
  }

  /** Graceful stop of every live worker: each must exit 0. */
  private async stopAll(): Promise<void> {
    await Promise.all([...this.slots.values()].filter((s) => !s.expectedExit).map(async (s) => {
      s.expectedExit = true;
      s.proc.child.kill('SIGTERM');
      const code = await s.proc.exited;
      if (code !== 0) this.violations.push(`worker ${s.name} exited with ${code} on SIGTERM`);
    }));
  }

  async killAll(): Promise<void> {
    await Promise.allSettled(this.respawns);
    for (const s of this.slots.values()) {
      if (s.proc.child.exitCode === null && s.proc.child.signalCode === null) {
        s.expectedExit = true;
        s.proc.child.kill('SIGKILL');
      }
    }
  }

  private async verify(seconds: number): Promise<ChaosReport> {
    const { s } = this;
    const q = async <T>(text: string) => (await this.pool.query<T & pg.QueryResultRow>(text)).rows;
    const [totals] = await q<{ jobs: number; completed: number; attempts: number }>(
      `SELECT count(*)::int AS jobs, count(*) FILTER (WHERE status = 'completed')::int AS completed,
              coalesce(sum(attempts), 0)::int AS attempts FROM ${s}.jobs`);
    const statuses = await q<{ status: string; n: number }>(`SELECT status, count(*)::int AS n FROM ${s}.jobs GROUP BY status`);
    // Each run with the end that matters for overlap: when it finished, or when its worker was killed.
    const runs = `SELECT r.job_id, r.worker, r.started_at, r.ended_at, k.at AS killed_at,
        coalesce(r.ended_at, k.at) AS until,
        lead(r.started_at) OVER w AS next_start,
        row_number() OVER w AS n, count(*) OVER (PARTITION BY r.job_id) AS of
      FROM ${s}.runs r LEFT JOIN ${s}.kills k USING (worker)
      WINDOW w AS (PARTITION BY r.job_id ORDER BY r.started_at)`;
    const [stats] = await q<{ runs: number; reruns: number; killed: number; killed_before_result: number;
      overlaps: number; unended: number; unexplained: number; last_unended: number }>(
      `SELECT count(*)::int AS runs,
              (count(*) - count(DISTINCT job_id))::int AS reruns,
              count(*) FILTER (WHERE ended_at IS NULL AND killed_at IS NOT NULL)::int AS killed,
              count(*) FILTER (WHERE n < of AND ended_at IS NOT NULL AND killed_at IS NOT NULL)::int AS killed_before_result,
              count(*) FILTER (WHERE until > next_start)::int AS overlaps,
              count(*) FILTER (WHERE until IS NULL)::int AS unended,
              count(*) FILTER (WHERE n < of AND killed_at IS NULL)::int AS unexplained,
              count(*) FILTER (WHERE n = of AND ended_at IS NULL)::int AS last_unended
       FROM (${runs}) r`);
    const [never] = await q<{ n: number }>(
      `SELECT count(*)::int AS n FROM ${s}.jobs j WHERE NOT EXISTS (SELECT 1 FROM ${s}.runs r WHERE r.job_id = j.id)`);
    const v = this.violations;
    const lost = totals!.jobs - totals!.completed;
    if (totals!.jobs !== this.options.jobs) v.push(`${this.options.jobs} jobs enqueued but ${totals!.jobs} in the table`);
    if (lost > 0) v.push(`${lost} jobs not completed: ${JSON.stringify(statuses)}`);
    if (never!.n > 0) v.push(`${never!.n} jobs never ran`);
    if (stats!.overlaps > 0) v.push(`${stats!.overlaps} runs overlapped the next run of the same job`);
    if (stats!.unended > 0) v.push(`${stats!.unended} runs never ended although their worker was not killed`);
    if (stats!.unexplained > 0) v.push(`${stats!.unexplained} re-runs of jobs whose earlier worker was not killed`);
    if (stats!.last_unended > 0) v.push(`${stats!.last_unended} jobs whose last run did not finish`);
    for (const [kind, n] of Object.entries(this.options.faults) as [FaultKind, number][]) {
      if (this.injected[kind] < n) v.push(`only ${this.injected[kind]} of ${n} '${kind}' faults were injected`);
    }
    return {
      jobs: totals!.jobs,
      completed: totals!.completed,
      lost,
      faults: { ...this.injected },
      runs: stats!.runs,
      reruns: stats!.reruns,
      killedMidRun: stats!.killed,
      killedBeforeResult: stats!.killed_before_result,
      unstartedClaims: totals!.attempts - stats!.runs,
      violations: v,
      seconds,
    };
  }
}

function shuffle<T>(items: T[]): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [items[i], items[j]] = [items[j]!, items[i]!];
  }
  return items;
}

/** One line per number, for the CLI and for test failure messages. */
export function formatReport(r: ChaosReport): string {
  const faults = r.faults.kill + r.faults.terminate + r.faults.restart;
  return [
    `jobs:               ${r.jobs}`,
    `completed:          ${r.completed}`,
    `lost:               ${r.lost}`,
    `faults injected:    ${faults} (${r.faults.kill} SIGKILL, ${r.faults.terminate} pg_terminate_backend, ${r.faults.restart} Postgres restarts)`,
    `handler runs:       ${r.runs}`,
    `re-runs:            ${r.reruns} (${r.killedMidRun} after a run cut short by SIGKILL, ${r.killedBeforeResult} after a run` +
      ' that finished on a worker SIGKILLed before it wrote the result)',
    `attempts - runs:    ${r.unstartedClaims} (above 0: claims whose reply was lost with its connection; below 0: jobs claimed ahead ` +
      'that started, and whose worker was killed before their start was written: the rescuer gave their attempt back)',
    `violations:         ${r.violations.length}`,
    ...r.violations.map((x) => `  - ${x}`),
    `drain time:         ${r.seconds.toFixed(1)} s`,
  ].join('\n');
}
