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

/** What a system's jobs table looks like after a run (a partitioned table: its partitions summed). */
export interface TableStats {
  totalBytes: number;
  heapBytes: number;
  indexBytes: number;
  liveTuples: number;
  deadTuples: number;
  updates: number;
  hotUpdates: number;
  deletes: number;
  autovacuums: number;
}

/**
 * Size and tuple statistics of `relation` and its partitions. Backends report their
 * counters when they exit, slightly after their client disconnected, so this reads
 * until the write counters hold still for 200 ms (at most 3 s).
 */
export async function tableStats(pool: pg.Pool, relation: string): Promise<TableStats> {
  const deadline = Date.now() + 3_000;
  let last = -1;
  for (;;) {
    const { rows } = await pool.query(
      `SELECT sum(pg_total_relation_size(c.oid))::float8 AS total, sum(pg_relation_size(c.oid))::float8 AS heap,
              sum(pg_indexes_size(c.oid))::float8 AS indexes, sum(s.n_live_tup)::float8 AS live, sum(s.n_dead_tup)::float8 AS dead,
              sum(s.n_tup_upd)::float8 AS upd, sum(s.n_tup_hot_upd)::float8 AS hot, sum(s.n_tup_del)::float8 AS del,
              sum(s.autovacuum_count)::float8 AS av
       FROM (SELECT $1::regclass AS relid UNION SELECT relid FROM pg_partition_tree($1::regclass) WHERE isleaf) t
       JOIN pg_class c ON c.oid = t.relid
       JOIN pg_stat_user_tables s ON s.relid = t.relid`, [relation]);
    const r = rows[0] as Record<string, number>;
    const writes = r.upd! + r.del!;
    if ((writes > 0 && writes === last) || Date.now() > deadline) {
      return {
        totalBytes: r.total!, heapBytes: r.heap!, indexBytes: r.indexes!, liveTuples: r.live!,
        deadTuples: r.dead!, updates: r.upd!, hotUpdates: r.hot!, deletes: r.del!, autovacuums: r.av!,
      };
    }
    last = writes;
    await sleep(200);
  }
}

/**
 * A fresh schema name for one system in one scenario, and a small pool of the
 * benchmark's own to read the system's tables; `drop()` drops the schema (the
 * system creates it when it installs).
 */
export class ScratchSchema {
  readonly schema: string;
  readonly s: string;
  readonly pool: pg.Pool;

  constructor(readonly url: string, label: string) {
    const name = label.replace(/[^a-z0-9]+/gi, '_').replace(/^_|_$/g, '').toLowerCase();
    this.schema = `bench_${name}_${randomBytes(3).toString('hex')}`;
    this.s = quoteSchema(this.schema);
    this.pool = new pg.Pool({ connectionString: url, max: 2, application_name: 'sluice-bench' });
    this.pool.on('error', () => {});
  }

  /** `SELECT ... AS n` → n. */
  async count(sql: string): Promise<number> {
    const { rows } = await this.pool.query<{ n: number }>(sql);
    return rows[0]!.n;
  }

  async drop(): Promise<void> {
    try {
      await this.pool.query(`DROP SCHEMA IF EXISTS ${this.s} CASCADE`);
    } finally {
      await this.pool.end();
    }
  }
}

/** A ScratchSchema with Sluice's tables migrated into it (the SQL-only limit works in one). */
export async function migratedSchema(url: string, label: string): Promise<ScratchSchema> {
  const db = new ScratchSchema(url, label);
  await migrate({ connectionString: url, schema: db.schema });
  return db;
}
