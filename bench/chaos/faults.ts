/**
 * The faults of the chaos run, one function each. Every fault is recorded in
 * <schema>.faults with its window by the server clock, the worker it hit or the
 * job rows it locked, so that verify.ts can tell which fault each re-run followed.
 * Faults are injected one at a time; each returns once it is over.
 */
import pg from 'pg';
import type { EmbeddedPostgres } from '../../src/dev/embedded-postgres.js';
import type { TcpProxy } from '../../tests/helpers/tcp-proxy.js';
import { LIMITED_QUEUE } from './chaos-jobs.js';

export const FAULT_KINDS = ['kill', 'terminate', 'restart', 'rowLock', 'queueLock', 'listenCut', 'cutOff'] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

export const FAULT_NAMES: Record<FaultKind, string> = {
  kill: 'SIGKILL of a worker process',
  terminate: 'pg_terminate_backend of every worker connection',
  restart: 'Postgres restart',
  rowLock: "outside session holding running jobs' rows",
  queueLock: "outside session holding the limited queue's row",
  listenCut: 'LISTEN connection blackholed',
  cutOff: 'worker cut off past the visibility timeout',
};

/** A live worker process as a fault sees it. */
export interface FaultTarget {
  name: string;
  output(): string;
  /** Its connectionString goes through `main`, its listenConnectionString through `listen`. */
  main: TcpProxy;
  listen: TcpProxy;
  /** The role its LISTEN connection logs in as (one per worker slot), to tell its session in pg_stat_activity. */
  listenRole: string;
}

/** What the faults need from the run. */
export interface FaultContext {
  server: EmbeddedPostgres;
  /** The driver's pool, straight to Postgres. */
  pool: pg.Pool;
  /** The quoted schema. */
  s: string;
  visibilityTimeoutMs: number;
  /** The workers' listenCheckIntervalMs. */
  listenCheckMs: number;
  log(line: string): void;
  violation(text: string): void;
  /** A random live worker. */
  pickWorker(): FaultTarget;
  /** SIGKILLs the worker, waits for its exit, and starts its replacement in the background. */
  kill(target: FaultTarget): Promise<void>;
  /** Runs `fn` until it succeeds (Postgres may be restarting). */
  retry<T>(fn: () => Promise<T>): Promise<T>;
}

/** A LISTEN connection that dropped is back within this (the notifier's longest backoff is 10 s). */
const LISTEN_UP_WITHIN_MS = 15_000;

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const between = (low: number, high: number) => Math.round(low + (high - low) * Math.random());

/** Injects one fault; returns a line for the log. */
export function inject(kind: FaultKind, ctx: FaultContext): Promise<string> {
  return FAULTS[kind](ctx);
}

const FAULTS: Record<FaultKind, (ctx: FaultContext) => Promise<string>> = {
  async kill(ctx) {
    const target = ctx.pickWorker();
    const id = await begin(ctx, 'kill', target.name);
    await ctx.kill(target);
    await end(ctx, id);
    return `SIGKILL ${target.name}; restarting it`;
  },

  async terminate(ctx) {
    const id = await begin(ctx, 'terminate');
    const { rows } = await ctx.retry(() =>
      ctx.pool.query<{ n: number }>(
        `SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity
       WHERE application_name IN ('sluice-worker', 'sluice-listen') AND pid <> pg_backend_pid()`,
      ),
    );
    await end(ctx, id, `${rows[0]!.n} connections`);
    return `pg_terminate_backend: ${rows[0]!.n} worker connections`;
  },

  async restart(ctx) {
    const id = await begin(ctx, 'restart');
    const t = Date.now();
    // Down long enough for claims, heartbeats, results and reconnects to fail a few times.
    await ctx.server.restart(() => sleep(between(500, 2_000)));
    await end(ctx, id, `down ${Date.now() - t} ms`);
    return `restarted Postgres (down ${Date.now() - t} ms)`;
  },

  /**
   * Another session locks some running jobs' rows (the longest-running first, then
   * a few at random) and sits idle in transaction: either briefly (the heartbeat
   * asks again and renews them once free) or past the visibility timeout (their
   * handlers must be aborted before the locks could be taken back).
   */
  async rowLock(ctx) {
    const vis = ctx.visibilityTimeoutMs;
    const holdMs = Math.random() < 0.5 ? between(0.3 * vis, 0.5 * vis) : between(1.1 * vis, 1.6 * vis);
    return outsideSession(ctx, async (client) => {
      const id = await begin(ctx, 'rowLock');
      const locked: { id: string; locked_by: string }[] = [];
      // Between waves nothing may be running: look again for a while.
      for (let i = 0; i < 50 && locked.length === 0; i++) {
        if (i > 0) await sleep(100);
        const longest = await client.query<{ id: string; locked_by: string }>(
          `SELECT id::text, locked_by FROM ${ctx.s}.jobs WHERE status = 'processing' AND started_at IS NOT NULL
           ORDER BY (payload->>'ms')::int DESC LIMIT 3 FOR UPDATE SKIP LOCKED`,
        );
        locked.push(...longest.rows);
      }
      const others = await client.query<{ id: string; locked_by: string }>(
        `SELECT id::text, locked_by FROM ${ctx.s}.jobs WHERE status = 'processing' AND id::text <> ALL($1::text[])
         ORDER BY random() LIMIT 3 FOR UPDATE SKIP LOCKED`,
        [locked.map((r) => r.id)],
      );
      locked.push(...others.rows);
      const ids = locked.map((r) => r.id);
      await ctx.retry(() => ctx.pool.query(`UPDATE ${ctx.s}.faults SET job_ids = $2 WHERE id = $1`, [id, ids]));
      await sleep(holdMs);
      await client.query('COMMIT');
      const workers = [...new Set(locked.map((r) => r.locked_by))].join(', ');
      await end(ctx, id, `${ids.length} rows held ${holdMs} ms`);
      return `outside session held ${ids.length} processing rows (of ${workers || 'no worker'}) for ${holdMs} ms`;
    });
  },

  /**
   * Another session holds the limited queue's row: that queue is not claimed
   * meanwhile, but the default queue must go on (claims and result writes).
   * Only judged when default jobs were due at the start: near the end of a wave
   * the few left may all be long runs, retries waiting out their backoff, or a
   * killed worker's jobs waiting for the rescuer, and none of those completes
   * in the window whatever the lock does.
   */
  async queueLock(ctx) {
    const holdMs = between(ctx.visibilityTimeoutMs, 1.75 * ctx.visibilityTimeoutMs);
    const defaultDone = async () =>
      (
        await ctx.pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM ${ctx.s}.jobs WHERE queue = 'default' AND status = 'completed'`,
        )
      ).rows[0]!.n;
    return outsideSession(ctx, async (client) => {
      await client.query(`SELECT name FROM ${ctx.s}.queues WHERE name = $1 FOR UPDATE`, [LIMITED_QUEUE]);
      const id = await begin(ctx, 'queueLock');
      const before = await defaultDone();
      const { rows: due } = await ctx.pool.query<{ id: string; attempts: number }>(
        `SELECT id::text, attempts FROM ${ctx.s}.jobs
         WHERE queue = 'default' AND status = 'pending' AND run_at <= now() ORDER BY id LIMIT 100`,
      );
      await sleep(holdMs);
      const after = await defaultDone();
      // A due job claimed in the window counts as progress too: it may be a long one still running.
      const {
        rows: [claimed],
      } = await ctx.pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${ctx.s}.jobs j
         JOIN unnest($1::bigint[], $2::int[]) AS d(id, attempts) ON d.id = j.id
         WHERE j.status <> 'pending' OR j.attempts > d.attempts`,
        [due.map((r) => r.id), due.map((r) => r.attempts)],
      );
      await client.query('COMMIT');
      await end(ctx, id, `default +${after - before} completed, ${claimed!.n} of ${due.length} due claimed`);
      if (due.length > 0 && after === before && claimed!.n === 0) {
        ctx.violation(
          `no job of the default queue was claimed or completed while another session held the '${LIMITED_QUEUE}' ` +
            `queue's row for ${holdMs} ms (${due.length} default jobs were due)`,
        );
      }
      return (
        `outside session held the '${LIMITED_QUEUE}' queue row for ${holdMs} ms; default queue +${after - before} ` +
        `completed and ${claimed!.n} of ${due.length} due jobs claimed meanwhile`
      );
    });
  },

  /**
   * One worker's LISTEN connection stops carrying packets; its liveness check must
   * find that out. Only a connection that is up can go silent: after an earlier
   * fault it may still be reconnecting (with a backoff of up to 10 s), so the
   * fault waits for it first.
   */
  async listenCut(ctx) {
    const target = ctx.pickWorker();
    const holdMs = between(3 * ctx.listenCheckMs, 5 * ctx.listenCheckMs);
    const listening = async () =>
      (
        await ctx.retry(() =>
          ctx.pool.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM pg_stat_activity WHERE usename = $1 AND application_name = 'sluice-listen'`,
            [target.listenRole],
          ),
        )
      ).rows[0]!.n > 0;
    const deadline = Date.now() + LISTEN_UP_WITHIN_MS;
    while (!(await listening())) {
      if (Date.now() > deadline) {
        ctx.violation(`${target.name} had no LISTEN connection for ${LISTEN_UP_WITHIN_MS} ms`);
        return `${target.name} had no LISTEN connection to blackhole`;
      }
      await sleep(100);
    }
    const mark = target.output().length;
    const id = await begin(ctx, 'listenCut', target.name);
    target.listen.cut();
    await sleep(holdMs);
    target.listen.restore();
    const found = target.output().slice(mark).includes('event listen-silent');
    await end(ctx, id, found ? 'found silent' : 'not found');
    if (!found) {
      ctx.violation(
        `${target.name}'s LISTEN connection was blackholed for ${holdMs} ms ` +
          `(listenCheckIntervalMs ${ctx.listenCheckMs}) and never reported silent`,
      );
    }
    return `blackholed ${target.name}'s LISTEN connection for ${holdMs} ms: ${found ? 'found silent and replaced' : 'NOT noticed'}`;
  },

  /**
   * A network partition of one worker (both of its connections) for longer than
   * the visibility timeout: its jobs are rescued and run elsewhere, so it must
   * have aborted their handlers before that.
   */
  async cutOff(ctx) {
    const target = ctx.pickWorker();
    const holdMs = between(1.25 * ctx.visibilityTimeoutMs, 1.75 * ctx.visibilityTimeoutMs);
    const id = await begin(ctx, 'cutOff', target.name);
    target.main.cut();
    target.listen.cut();
    await sleep(holdMs);
    target.main.restore();
    target.listen.restore();
    await end(ctx, id);
    const {
      rows: [aborted],
    } = await ctx.retry(() =>
      ctx.pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${ctx.s}.runs r JOIN ${ctx.s}.faults f ON f.id = $1
       WHERE r.worker = $2 AND r.aborted IS NOT NULL AND r.ended_at BETWEEN f.started_at AND f.ended_at`,
        [id, target.name],
      ),
    );
    return `cut ${target.name} off for ${holdMs} ms; it aborted ${aborted!.n} running handlers meanwhile`;
  },
};

/** A session of its own in an open transaction (not from the pool: it sits idle in transaction for seconds). */
async function outsideSession<T>(ctx: FaultContext, body: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: ctx.server.url, application_name: 'chaos-locker' });
  client.on('error', () => {});
  await client.connect();
  try {
    await client.query('BEGIN');
    return await body(client);
  } finally {
    await client.end().catch(() => {});
  }
}

async function begin(ctx: FaultContext, kind: FaultKind, worker?: string): Promise<number> {
  const { rows } = await ctx.retry(() =>
    ctx.pool.query<{ id: number }>(`INSERT INTO ${ctx.s}.faults (kind, worker) VALUES ($1, $2) RETURNING id`, [
      kind,
      worker ?? null,
    ]),
  );
  return rows[0]!.id;
}

async function end(ctx: FaultContext, id: number, note?: string): Promise<void> {
  await ctx.retry(() =>
    ctx.pool.query(`UPDATE ${ctx.s}.faults SET ended_at = clock_timestamp(), note = $2 WHERE id = $1`, [id, note ?? null]),
  );
}
