import type { Queryable } from '../db/executor.js';
import type { WorkerStatements } from '../db/statements/worker.js';
import { channelFor } from '../db/identifiers.js';
import type { PeriodicTask } from './runner.js';

export interface RescuedJob {
  id: string;
  queue: string;
  status: 'pending' | 'failed';
}

const BATCH = 1_000;

/**
 * Gives back jobs whose worker stopped heartbeating (crashed, hung, cut off): any
 * live worker may run it; SKIP LOCKED keeps several rescuers from colliding.
 * Rescued jobs that go back to pending wake the workers of their queues.
 */
export async function rescueExpired(
  db: Queryable,
  queries: WorkerStatements,
  visibilityTimeoutMs: number,
): Promise<RescuedJob[]> {
  const { rows } = (await db.query(queries.rescue, [visibilityTimeoutMs, BATCH])) as { rows: RescuedJob[] };
  const queues = [...new Set(rows.filter((r) => r.status === 'pending').map((r) => r.queue))];
  if (queues.length > 0) await db.query(queries.notify, [channelFor(queries.schema), queues]);
  return rows;
}

/** rescueExpired as a leader task: runs on one worker of the cluster, every `intervalMs`. */
export function rescuerTask(
  db: Queryable,
  queries: WorkerStatements,
  visibilityTimeoutMs: number,
  intervalMs: number,
  rescued: (jobs: RescuedJob[]) => void,
): PeriodicTask {
  return {
    name: 'rescuer',
    intervalMs,
    run: async () => {
      const jobs = await rescueExpired(db, queries, visibilityTimeoutMs);
      if (jobs.length > 0) rescued(jobs);
    },
  };
}
