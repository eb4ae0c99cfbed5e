/**
 * The chaos run: worker processes drain a stream of jobs on a private embedded
 * Postgres while faults are injected one at a time (faults.ts): SIGKILLs of
 * worker processes, pg_terminate_backend of every worker connection, restarts of
 * Postgres, outside sessions holding running jobs' rows or a queue's row, a
 * blackholed LISTEN connection, and a worker cut off past the visibility timeout.
 * Each worker process reaches Postgres through TCP proxies of its own (one for its
 * connectionString, one for its listenConnectionString), so a network fault hits
 * one worker. Afterwards verify.ts checks the records: every job completed, no
 * overlapping runs, every re-run explained by a fault.
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
import { startTcpProxy, type TcpProxy } from '../../tests/helpers/tcp-proxy.js';
import { chaosJob, LIMITED_QUEUE, LIMITED_QUEUE_CONCURRENCY, recordTables, SCHEMA } from './chaos-jobs.js';
import { FAULT_KINDS, inject, type FaultContext, type FaultKind, type FaultTarget } from './faults.js';
import { verify, type ChaosReport } from './verify.js';

export { formatReport, type ChaosReport } from './verify.js';
export { FAULT_KINDS, type FaultKind } from './faults.js';

const WORKER_SCRIPT = fileURLToPath(new URL('./chaos-worker.ts', import.meta.url));
/** Jobs arrive in waves, one a second. */
const WAVE_MS = 1_000;
/**
 * This share of the jobs (at least one) is held back until every fault has been
 * injected, so the queue cannot drain before the last fault, however long the
 * faults take on a slow machine.
 */
const TAIL_SHARE = 0.02;

export interface ChaosOptions {
  jobs: number;
  workers: number;
  concurrency: number;
  /** How many faults of each kind to inject, spread over the run by progress (one at a time). */
  faults: Record<FaultKind, number>;
  /** The workers' visibility timeout; their other lock and connection settings are fractions of it (chaos-worker.ts). */
  visibilityTimeoutMs: number;
  /**
   * The jobs are enqueued in waves, one a second, over this long: the run lasts
   * at least this long, so faults land while work keeps arriving (and wake-ups
   * travel over LISTEN). 0: all at once.
   */
  spreadMs: number;
  /** Give up (a violation) when the queue has not drained after this long. */
  timeoutMs: number;
  log?: (line: string) => void;
}

/** One worker process slot: its proxies stay, the process is replaced when it dies. */
interface Slot {
  name: string;
  /** Undefined until the first process has started. */
  proc?: WorkerProcess;
  /** Set before the driver kills or stops it (and while it is not running): any other exit is a violation. */
  expectedExit: boolean;
  main: TcpProxy;
  listen: TcpProxy;
  /** The role its LISTEN connection logs in as, to tell that session apart (see faults.ts, listenCut). */
  listenRole: string;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

export async function runChaos(options: ChaosOptions): Promise<ChaosReport> {
  const log = options.log ?? (() => {});
  const server = await startPrivatePostgres('chaos');
  const pool = new pg.Pool({ connectionString: server.url, max: 6, application_name: 'chaos-driver' });
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
  private readonly slots: Slot[] = [];
  private readonly respawns = new Set<Promise<void>>();
  /** What every worker process printed, killed ones included (their event lines are counted). */
  private readonly outputs: (() => string)[] = [];
  private readonly violations: string[] = [];
  private readonly injected = Object.fromEntries(FAULT_KINDS.map((k) => [k, 0])) as Record<FaultKind, number>;
  private generation = 0;
  private done = false;
  private faultsOver!: () => void;
  /** Resolves once every planned fault has been injected (or the run is over). */
  private readonly faultsInjected = new Promise<void>((resolve) => (this.faultsOver = resolve));

  constructor(
    private readonly options: ChaosOptions,
    private readonly server: EmbeddedPostgres,
    private readonly pool: pg.Pool,
    private readonly log: (line: string) => void,
  ) {}

  async execute(): Promise<ChaosReport> {
    const { jobs, workers } = this.options;
    await migrate({ connectionString: this.server.url, schema: SCHEMA });
    await this.pool.query(recordTables(this.s));
    const queue = new Queue({ pool: this.pool, schema: SCHEMA });
    await queue.setQueueConcurrency(LIMITED_QUEUE, LIMITED_QUEUE_CONCURRENCY);
    const password = decodeURIComponent(new URL(this.server.url).password);
    for (let i = 0; i < workers; i++) {
      const listenRole = `chaos_listen_${i}`;
      const { rows } = await this.pool.query<{ sql: string }>(
        `SELECT format('CREATE ROLE %I LOGIN PASSWORD %L', $1::text, $2::text) AS sql`,
        [listenRole, password],
      );
      await this.pool.query(rows[0]!.sql);
      this.slots.push({
        name: '',
        expectedExit: true,
        listenRole,
        main: await startTcpProxy(this.server.url),
        listen: await startTcpProxy(this.server.url),
      });
    }
    await Promise.all(this.slots.map((_, i) => this.spawn(i)));
    this.log(`${workers} worker processes up; enqueueing ${jobs} jobs over ${this.options.spreadMs / 1_000} s`);

    const started = Date.now();
    const tail = Math.max(1, Math.floor(jobs * TAIL_SHARE));
    const producing = this.produce(queue, started, tail);
    const plan = shuffle(FAULT_KINDS.flatMap((kind) => Array<FaultKind>(this.options.faults[kind]).fill(kind)));
    const faults = this.faultContext();
    let next = 0;
    let lastProgress = Date.now();
    for (;;) {
      if (next === plan.length) this.faultsOver();
      const completed = await this.completedCount();
      if (completed === jobs) break;
      if (Date.now() - lastProgress >= 5_000) {
        lastProgress = Date.now();
        this.log(`${this.elapsed(started)}: ${completed ?? '?'} of ${jobs} completed`);
      }
      if (Date.now() - started > this.options.timeoutMs) {
        this.violations.push(
          `the queue did not drain within ${this.options.timeoutMs} ms (${completed ?? '?'} of ${jobs} completed)`,
        );
        break;
      }
      // Fault i fires once (i+1)/(faults+1) of the jobs before the tail are done, so every fault lands mid-run.
      if (next < plan.length && completed !== undefined && completed >= ((jobs - tail) * (next + 1)) / (plan.length + 1)) {
        const kind = plan[next++]!;
        this.injected[kind]++;
        this.log(`${this.elapsed(started)} [${completed}] ${await inject(kind, faults)}`);
        continue;
      }
      await sleep(50);
    }
    const seconds = (Date.now() - started) / 1_000;
    this.done = true;
    this.faultsOver();
    await producing;
    await Promise.all(this.respawns);
    await this.stopAll();
    return verify(this.pool, this.s, {
      expectedJobs: jobs,
      visibilityTimeoutMs: this.options.visibilityTimeoutMs,
      injected: this.injected,
      planned: this.options.faults,
      outputs: this.outputs.map((o) => o()),
      violations: this.violations,
      seconds,
    });
  }

  private elapsed(since: number): string {
    return `${((Date.now() - since) / 1_000).toFixed(1).padStart(5)} s`;
  }

  /**
   * Enqueues the jobs in waves over spreadMs, and the last `tail` of them once
   * every fault has been injected.
   */
  private async produce(queue: Queue, started: number, tail: number): Promise<void> {
    const { jobs, spreadMs } = this.options;
    const waves = Math.max(1, Math.ceil(spreadMs / WAVE_MS));
    const main = jobs - tail;
    for (let w = 0; w < waves && !this.done; w++) {
      await sleep(started + w * WAVE_MS - Date.now());
      await this.enqueueWave(queue, w, Math.floor((main * w) / waves), Math.floor((main * (w + 1)) / waves));
    }
    await this.faultsInjected;
    if (!this.done) await this.enqueueWave(queue, waves, main, jobs);
  }

  /**
   * Enqueues jobs [from, to) in one transaction with the wave's row in waves: a
   * wave retried after a lost reply (Postgres restarting) finds its row and is
   * not added twice.
   */
  private async enqueueWave(queue: Queue, wave: number, from: number, to: number): Promise<void> {
    const specs = Array.from({ length: to - from }, (_, k) => chaosJob(from + k, this.options.visibilityTimeoutMs));
    await this.retry(async () => {
      const client = await this.pool.connect();
      try {
        await client.query('BEGIN');
        const { rowCount } = await client.query(`INSERT INTO ${this.s}.waves (n) VALUES ($1) ON CONFLICT DO NOTHING`, [wave]);
        for (let i = 0; rowCount === 1 && i < specs.length; i += 5_000) {
          await queue.enqueueMany(specs.slice(i, i + 5_000), { tx: client });
        }
        await client.query('COMMIT');
        client.release();
      } catch (err) {
        client.release(err as Error);
        throw err;
      }
    });
  }

  private faultContext(): FaultContext {
    const target = (slot: Slot): FaultTarget => ({
      name: slot.name,
      output: slot.proc!.output,
      main: slot.main,
      listen: slot.listen,
      listenRole: slot.listenRole,
    });
    return {
      server: this.server,
      pool: this.pool,
      s: this.s,
      visibilityTimeoutMs: this.options.visibilityTimeoutMs,
      listenCheckMs: Math.floor(this.options.visibilityTimeoutMs / 5), // as chaos-worker.ts sets it
      log: this.log,
      violation: (text) => this.violations.push(text),
      pickWorker: () => {
        const live = this.slots.filter((s) => !s.expectedExit);
        return target(live[Math.floor(Math.random() * live.length)]!);
      },
      kill: async ({ name }) => {
        const index = this.slots.findIndex((s) => s.name === name);
        const victim = this.slots[index]!;
        victim.expectedExit = true;
        victim.proc!.child.kill('SIGKILL');
        await victim.proc!.exited;
        await this.retry(() =>
          this.pool.query(`INSERT INTO ${this.s}.kills (worker, at) VALUES ($1, clock_timestamp())`, [name]),
        );
        this.respawn(index);
      },
      retry: (fn) => this.retry(fn),
    };
  }

  private async spawn(index: number): Promise<void> {
    const slot = this.slots[index]!;
    const name = `w${index}.${++this.generation}`;
    const listenUrl = new URL(slot.listen.url);
    listenUrl.username = slot.listenRole;
    const proc = await spawnWorker(
      {
        DATABASE_URL: slot.main.url,
        LISTEN_URL: listenUrl.toString(),
        RECORD_URL: this.server.url,
        SLUICE_SCHEMA: SCHEMA,
        WORKER_NAME: name,
        CONCURRENCY: String(this.options.concurrency),
        VISIBILITY_MS: String(this.options.visibilityTimeoutMs),
      },
      WORKER_SCRIPT,
    );
    Object.assign(slot, { name, proc, expectedExit: false });
    this.outputs.push(proc.output);
    void proc.exited.then((code) => {
      if (slot.proc !== proc || slot.expectedExit) return;
      this.violations.push(
        `worker ${name} exited by itself (${code}) at ${new Date().toISOString()}:\n${proc.output().slice(-2_000)}`,
      );
      // Like a process supervisor: the run goes on with a new process in its slot.
      slot.expectedExit = true;
      if (!this.done) this.respawn(index);
    });
  }

  /** Starts a new process in the slot in the background; the run goes on meanwhile. */
  private respawn(index: number): void {
    const respawn = this.spawn(index)
      .catch((err: Error) => void this.violations.push(`slot ${index}: a new worker process did not start: ${err.message}`))
      .finally(() => this.respawns.delete(respawn));
    this.respawns.add(respawn);
  }

  private async completedCount(): Promise<number | undefined> {
    try {
      const { rows } = await this.pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${this.s}.jobs WHERE status = 'completed'`,
      );
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
    await Promise.all(
      this.slots
        .filter((s) => !s.expectedExit)
        .map(async (s) => {
          s.expectedExit = true;
          s.proc!.child.kill('SIGTERM');
          const code = await s.proc!.exited;
          if (code !== 0) this.violations.push(`worker ${s.name} exited with ${code} on SIGTERM`);
        }),
    );
  }

  async killAll(): Promise<void> {
    this.done = true;
    await Promise.allSettled(this.respawns);
    for (const s of this.slots) {
      if (s.proc && s.proc.child.exitCode === null && s.proc.child.signalCode === null) {
        s.expectedExit = true;
        s.proc.child.kill('SIGKILL');
      }
      await s.main.close();
      await s.listen.close();
    }
  }
}

function shuffle<T>(items: T[]): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [items[i], items[j]] = [items[j]!, items[i]!];
  }
  return items;
}
