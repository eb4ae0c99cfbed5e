import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { migrate } from '../../src/migrate.js';
import { quoteSchema } from '../../src/db/identifiers.js';
import { startEmbeddedPostgres } from '../../src/dev/embedded-postgres.js';
import { sleep } from './clock.js';

/** The server the benchmark runs on, described in the results. */
export interface ServerInfo {
  source: 'DATABASE_URL' | 'embedded';
  version: string;
  settings: Record<string, string>;
}

export interface BenchServer {
  url: string;
  info: ServerInfo;
  stop(): Promise<void>;
}

const REPORTED_SETTINGS = ['fsync', 'synchronous_commit', 'shared_buffers', 'max_connections', 'wal_level'];

/**
 * DATABASE_URL when set; otherwise a private embedded Postgres with default
 * (durable: fsync on) settings in a temporary directory, removed afterwards.
 */
export async function openServer(log: (line: string) => void): Promise<BenchServer> {
  let url = process.env.DATABASE_URL;
  let stop = async () => {};
  if (!url) {
    const dataDir = await mkdtemp(join(tmpdir(), 'sluice-bench-pg-'));
    log(`starting an embedded Postgres in ${dataDir}`);
    const embedded = await startEmbeddedPostgres({ dataDir, persistent: false });
    url = embedded.url;
    stop = async () => {
      await embedded.stop();
      await rm(dataDir, { recursive: true, force: true });
    };
  }
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ name: string; setting: string; unit: string | null }>(
      'SELECT name, setting, unit FROM pg_settings WHERE name = ANY($1)', [REPORTED_SETTINGS]);
    const settings = Object.fromEntries(rows.map((r) => [r.name, r.unit ? `${r.setting} (${r.unit})` : r.setting]));
    const version = (await client.query<{ v: string }>('SELECT current_setting($$server_version$$) AS v')).rows[0]!.v;
    return { url, info: { source: process.env.DATABASE_URL ? 'DATABASE_URL' : 'embedded', version, settings }, stop };
  } finally {
    await client.end();
  }
}

/** What the jobs table looks like after a run. */
export interface TableStats {
  totalBytes: number;
  heapBytes: number;
  indexBytes: number;
  liveTuples: number;
  deadTuples: number;
  updates: number;
  hotUpdates: number;
  autovacuums: number;
}

/** A freshly migrated schema for one scenario, dropped afterwards. */
export class BenchSchema {
  readonly s: string;
  readonly pool: pg.Pool;

  private constructor(readonly url: string, readonly schema: string) {
    this.s = quoteSchema(schema);
    this.pool = new pg.Pool({ connectionString: url, max: 12, application_name: 'sluice-bench' });
    this.pool.on('error', () => {});
  }

  static async create(url: string, label: string): Promise<BenchSchema> {
    const schema = `bench_${label}_${randomBytes(3).toString('hex')}`;
    await migrate({ connectionString: url, schema });
    return new BenchSchema(url, schema);
  }

  /**
   * `count` pending no-op jobs in one INSERT ... SELECT, so a drain measures the
   * worker and not the enqueue. Payload `{"i": n}` numbers them from 0.
   */
  async prefill(count: number, task = 'noop'): Promise<void> {
    await this.pool.query(
      `INSERT INTO ${this.s}.jobs (task, payload) SELECT $2, jsonb_build_object('i', g) FROM generate_series(0, $1 - 1) g`,
      [count, task]);
    await this.pool.query(`ANALYZE ${this.s}.jobs`);
  }

  async countStatus(status: string): Promise<number> {
    const { rows } = await this.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${this.s}.jobs WHERE status = $1`, [status]);
    return rows[0]!.n;
  }

  /**
   * Size and tuple statistics of the jobs table. Backends report their counters
   * when they exit, slightly after their client disconnected, so this waits (up to
   * 3 s) for the update counter to reach what the run must have done.
   */
  async tableStats(minUpdates = 0): Promise<TableStats> {
    const deadline = Date.now() + 3_000;
    for (;;) {
      const { rows } = await this.pool.query(
        `SELECT pg_total_relation_size(c.oid)::float8 AS total, pg_relation_size(c.oid)::float8 AS heap,
                pg_indexes_size(c.oid)::float8 AS indexes, s.n_live_tup::float8 AS live, s.n_dead_tup::float8 AS dead,
                s.n_tup_upd::float8 AS upd, s.n_tup_hot_upd::float8 AS hot, s.autovacuum_count::float8 AS av
         FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid
         WHERE c.oid = $1::regclass`, [`${this.s}.jobs`]);
      const r = rows[0] as Record<string, number>;
      if (r.upd! >= minUpdates || Date.now() > deadline) {
        return {
          totalBytes: r.total!, heapBytes: r.heap!, indexBytes: r.indexes!, liveTuples: r.live!,
          deadTuples: r.dead!, updates: r.upd!, hotUpdates: r.hot!, autovacuums: r.av!,
        };
      }
      await sleep(100);
    }
  }

  async drop(): Promise<void> {
    try {
      await this.pool.query(`DROP SCHEMA IF EXISTS ${this.s} CASCADE`);
    } finally {
      await this.pool.end();
    }
  }
}
