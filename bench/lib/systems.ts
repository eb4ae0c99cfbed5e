import { fileURLToPath } from 'node:url';
import { peersNode } from './peers.js';

/**
 * A queue the benchmark measures. Its processes run bench/systems/process.mjs with
 * `adapter` (the system's own API) under `execPath`; the benchmark reads its tables
 * with the SQL below (`s`: the quoted schema).
 */
export interface System {
  /** Column header of the comparison table. */
  label: string;
  adapter: string;
  variant?: string;
  execPath: string;
  /** Has no worker: measured by the enqueue scenario only (the seed pattern). */
  enqueueOnly?: boolean;
  /** The table holding the jobs (partitions summed), for size and dead tuples. */
  jobsTable(s: string): string;
  /** Jobs not yet taken by a worker: `SELECT ... AS n`. */
  pendingSql(s: string): string;
  /** Jobs whose completion is not written yet: `SELECT ... AS n`. */
  unfinishedSql(s: string): string;
}

const at = (path: string) => fileURLToPath(new URL(path, import.meta.url));

export const SLUICE: System = {
  label: 'Sluice',
  adapter: at('../systems/sluice.mjs'),
  execPath: process.execPath,
  jobsTable: (s) => `${s}.jobs`,
  pendingSql: (s) => `SELECT count(*)::int AS n FROM ${s}.jobs WHERE status = 'pending'`,
  unfinishedSql: (s) => `SELECT count(*)::int AS n FROM ${s}.jobs WHERE status <> 'completed'`,
};

/** A plain table, a plain INSERT with a per-row NOTIFY trigger, a plain `unnest` INSERT. */
export const SEED_SQL: System = {
  label: 'plain SQL (seed)',
  adapter: at('../systems/seed-sql.mjs'),
  execPath: process.execPath,
  enqueueOnly: true,
  jobsTable: (s) => `${s}.jobs`,
  pendingSql: (s) => `SELECT count(*)::int AS n FROM ${s}.jobs WHERE status = 'pending'`,
  unfinishedSql: (s) => `SELECT count(*)::int AS n FROM ${s}.jobs WHERE status <> 'completed'`,
};

/** graphile-worker deletes a job when it completes it. */
function graphileWorker(variant: 'batched' | 'default', execPath: string): System {
  return {
    label: `graphile-worker (${variant})`,
    adapter: at('../peers/graphile-worker.mjs'),
    variant,
    execPath,
    jobsTable: (s) => `${s}._private_jobs`,
    pendingSql: (s) => `SELECT count(*)::int AS n FROM ${s}._private_jobs WHERE locked_at IS NULL`,
    unfinishedSql: (s) => `SELECT count(*)::int AS n FROM ${s}._private_jobs`,
  };
}

/** pg-boss keeps completed jobs (state 'completed') in its partitioned job table. */
function pgBoss(variant: 'batched' | 'default', execPath: string): System {
  return {
    label: `pg-boss (${variant})`,
    adapter: at('../peers/pg-boss.mjs'),
    variant,
    execPath,
    jobsTable: (s) => `${s}.job`,
    pendingSql: (s) => `SELECT count(*)::int AS n FROM ${s}.job WHERE state IN ('created', 'retry')`,
    unfinishedSql: (s) => `SELECT count(*)::int AS n FROM ${s}.job WHERE state <> 'completed'`,
  };
}

/**
 * The systems of one run, in the order of the comparison table's columns: Sluice
 * and the plain SQL of the seed pattern, and with `peers` graphile-worker and
 * pg-boss between them, each at its batched settings and at its defaults.
 */
export function systemsOfRun(peers: boolean, log: (line: string) => void): System[] {
  if (!peers) return [SLUICE, SEED_SQL];
  const node22 = peersNode(log);
  return [
    SLUICE,
    graphileWorker('batched', node22), graphileWorker('default', node22),
    pgBoss('batched', node22), pgBoss('default', node22),
    SEED_SQL,
  ];
}
