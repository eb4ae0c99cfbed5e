import type { Queryable } from '../db/executor.js';
import type { FinishedStatus } from '../job.js';
import type { MaintenanceStatements } from '../db/statements/maintenance.js';
import type { PeriodicTask } from './runner.js';

/** Milliseconds to keep finished jobs, by status. */
export type Retention = Partial<Record<FinishedStatus, number>>;

export interface ResolvedPrunerConfig {
  /** 'archive': move to jobs_history, drop whole partitions later. 'delete': delete. */
  mode: 'archive' | 'delete';
  /** Finished rows stay in the hot table at least this long (getJob, waitFor right after). */
  delayMs: number;
  intervalMs: number;
  batchSize: number;
  /** Most batches in one run, so one run cannot hold the leader's connection for long. */
  maxBatches: number;
  retention: Required<Retention>;
  queues: Record<string, Retention>;
}

export interface PruneResult {
  /** Rows that left the hot table. */
  removed: number;
  /** Of those, rows written to jobs_history. */
  archived: number;
  /** History partitions dropped because everything in them expired. */
  droppedPartitions: string[];
  /** job_groups rows that held only a full token bucket, deleted. */
  groupBuckets: number;
}

// SQLSTATE 23514 with this message: no history partition covers a row's purge day.
const NO_PARTITION = /no partition of relation/;

/**
 * Moves finished jobs out of the hot table in batches: into jobs_history (archive
 * mode), or deletes them (delete mode). Then drops history partitions whose rows
 * have all expired and creates the ones the next days need, and deletes the
 * job_groups rows that hold only a full token bucket.
 *
 * Safe to run concurrently (SKIP LOCKED, idempotent partition DDL), so a leader
 * handover that overlaps two pruners does no harm.
 */
export async function prune(db: Queryable, queries: MaintenanceStatements, config: ResolvedPrunerConfig): Promise<PruneResult> {
  const archive = config.mode === 'archive';
  const retentions = retentionValues(config);
  if (archive) await db.query(queries.createPartitionsAhead, [queries.schema, retentions]);
  const params = [
    archive ? config.delayMs : Math.max(config.delayMs, Math.min(...retentions)),
    config.batchSize,
    JSON.stringify(config.queues),
    JSON.stringify(config.retention),
    archive,
  ];
  const result: PruneResult = { removed: 0, archived: 0, droppedPartitions: [], groupBuckets: 0 };
  for (let batch = 0; batch < config.maxBatches; batch++) {
    const row = await pruneBatch(db, queries, params);
    result.removed += row.removed;
    result.archived += row.archived;
    if (row.removed < config.batchSize) break;
  }
  if (archive) {
    const { rows } = await db.query(queries.dropExpired, [queries.schema]);
    result.droppedPartitions = rows.map((r: { dropped: string }) => r.dropped);
  }
  for (let batch = 0; batch < config.maxBatches; batch++) {
    const { rows } = await db.query(queries.pruneGroupBuckets, [config.batchSize]);
    result.groupBuckets += rows.length;
    if (rows.length < config.batchSize) break;
  }
  return result;
}

async function pruneBatch(
  db: Queryable,
  queries: MaintenanceStatements,
  params: unknown[],
): Promise<{ removed: number; archived: number }> {
  try {
    const { rows } = await db.query(queries.prune, params);
    return rows[0];
  } catch (err) {
    if (!NO_PARTITION.test((err as Error).message ?? '')) throw err;
    // Rows whose purge day has no partition yet (finished long ago, or a new
    // retention): make their partitions and try once more.
    const { rows: days } = await db.query(queries.partitionsNeeded, params);
    for (const { day } of days as { day: string }[]) {
      await db.query(queries.createPartition, [queries.schema, day]);
    }
    const { rows } = await db.query(queries.prune, params);
    return rows[0];
  }
}

/** Every retention in force, in ms (defaults and per-queue rules). */
function retentionValues(config: ResolvedPrunerConfig): number[] {
  const values = new Set<number>(Object.values(config.retention));
  for (const rule of Object.values(config.queues)) for (const ms of Object.values(rule)) values.add(ms);
  return [...values];
}

/** The pruner as a leader task. */
export function prunerTask(
  db: Queryable,
  queries: MaintenanceStatements,
  config: ResolvedPrunerConfig,
  pruned: (result: PruneResult) => void,
): PeriodicTask {
  return {
    name: 'pruner',
    intervalMs: config.intervalMs,
    run: async () => {
      const result = await prune(db, queries, config);
      if (result.removed > 0 || result.droppedPartitions.length > 0 || result.groupBuckets > 0) pruned(result);
    },
  };
}
