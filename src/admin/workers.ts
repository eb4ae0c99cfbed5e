import { rows, type Queryable } from '../db/executor.js';
import { workerRegistryStatements } from '../db/statements/workers.js';
import { wrapDatabaseError } from '../errors.js';
import { MISSED_INTERVALS_DEAD } from '../worker/registry.js';
import { knownOptions } from './input.js';

/** A job a worker runs now (or holds, claimed ahead, with no start yet). */
export interface RunningJob {
  id: string;
  queue: string;
  task: string;
  /** When its handler started; null while it waits for a slot on that worker. */
  startedAt: string | null;
  progress: unknown;
}

/** A worker as its registry row shows it (migration 0017), with what it runs now. */
export interface WorkerInfo {
  /** Its instance id, the jobs' locked_by. */
  id: string;
  host: string;
  pid: number;
  queues: string[];
  tasks: string[];
  concurrency: number;
  version: string;
  intervalMs: number;
  startedAt: Date;
  lastSeenAt: Date;
  /** Refreshed within the last few of its intervals; a dead worker's row stays until the leader deletes it. */
  alive: boolean;
  /**
   * When it stopped, for a worker that stopped while another session held rows of
   * its jobs: its row stays, listing them, until the leader deletes it (migration 0036).
   */
  stoppedAt: Date | null;
  runningCount: number;
  /** The first `runningPerWorker` of them, oldest start first. */
  running: RunningJob[];
}

/** Due jobs that no live worker will claim: their queue is served, their task by nobody. */
export interface UnknownTask {
  queue: string;
  task: string;
  jobs: number;
  /** How long the oldest of them has been due. */
  oldestMs: number;
}

/**
 * Every worker in the registry, alive ones first, with the jobs each runs now.
 *
 * @example
 *   for (const w of await listWorkers(pool, 'sluice')) console.log(w.id, w.alive, w.runningCount);
 */
export async function listWorkers(
  db: Queryable,
  schema: string,
  options: { runningPerWorker?: number } = {},
): Promise<WorkerInfo[]> {
  options = knownOptions(options, new Set(['runningPerWorker']), 'listWorkers');
  const { list } = workerRegistryStatements(schema);
  try {
    return await rows<WorkerInfo>(db, list, [MISSED_INTERVALS_DEAD, options.runningPerWorker ?? 20]);
  } catch (err) {
    throw wrapDatabaseError(err, 'listWorkers failed');
  }
}

/** Queues with due pending jobs and no live worker: those findUnknownTasks leaves out. */
export async function findUnwatchedQueues(db: Queryable, schema: string): Promise<string[]> {
  const { unwatchedQueues } = workerRegistryStatements(schema);
  try {
    return (await rows<{ queue: string }>(db, unwatchedQueues, [MISSED_INTERVALS_DEAD])).map((r) => r.queue);
  } catch (err) {
    throw wrapDatabaseError(err, 'findUnwatchedQueues failed');
  }
}

/**
 * Due pending jobs whose task no live worker of their queue handles, by queue
 * and task, most jobs first. Queues without any live worker are not included.
 */
export async function findUnknownTasks(db: Queryable, schema: string): Promise<UnknownTask[]> {
  const { unknownTasks } = workerRegistryStatements(schema);
  try {
    const found = await rows<UnknownTask>(db, unknownTasks, [MISSED_INTERVALS_DEAD]);
    return found.map((u) => ({ ...u, oldestMs: Math.max(0, Math.round(u.oldestMs)) }));
  } catch (err) {
    throw wrapDatabaseError(err, 'findUnknownTasks failed');
  }
}
