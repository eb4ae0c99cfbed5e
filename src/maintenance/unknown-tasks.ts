import { findUnknownTasks, type UnknownTask } from '../admin/workers.js';
import type { Queryable } from '../db/executor.js';
import { workerRegistryStatements } from '../db/statements/workers.js';
import type { Logger } from '../logger.js';
import { MISSED_INTERVALS_PRUNED } from '../worker/registry.js';
import type { PeriodicTask } from './runner.js';

export interface UnknownTasksOptions {
  /** How often the leader looks. Default 60 s. */
  intervalMs?: number;
  /** The same queue and task is warned about at most this often. Default 10 min. */
  repeatMs?: number;
  /** For tests: the clock the repeat is measured on. */
  now?: () => number;
}

/**
 * A leader task: warns about due jobs whose task no live worker of their queue
 * handles (they would wait forever, silently), naming task, queue and count,
 * once per `repeatMs` for each queue and task. Each pass first deletes the
 * registry rows of workers long dead, so the registry stays small and the
 * check reads only workers that might still be around.
 */
export function unknownTasksTask(
  db: Queryable,
  schema: string,
  logger: Logger | undefined,
  options: UnknownTasksOptions = {},
  /** Told the ones warned about in a pass (the worker's 'tasks:unhandled' event): a worker with no logger said nothing (outside review 273). */
  warn: (tasks: UnknownTask[]) => void = () => {},
): PeriodicTask {
  const repeatMs = options.repeatMs ?? 600_000;
  const now = options.now ?? Date.now;
  /** `queue\0task` → when it was last warned about. */
  const warned = new Map<string, number>();
  return {
    name: 'unknown-tasks',
    intervalMs: options.intervalMs ?? 60_000,
    run: async () => {
      await db.query(workerRegistryStatements(schema).prune, [MISSED_INTERVALS_PRUNED]);
      const unknown = await findUnknownTasks(db, schema);
      const at = now();
      const current = new Set<string>();
      const told: UnknownTask[] = [];
      for (const u of unknown) {
        const key = `${u.queue}\0${u.task}`;
        current.add(key);
        const last = warned.get(key);
        if (last !== undefined && at - last < repeatMs) continue;
        warned.set(key, at);
        told.push(u);
        logger?.warn(
          { queue: u.queue, task: u.task, jobs: u.jobs, oldestMs: u.oldestMs },
          `sluice: ${u.jobs} due jobs of task ${JSON.stringify(u.task)} on queue ${JSON.stringify(u.queue)} wait: no live worker of that queue handles the task`,
        );
      }
      if (told.length > 0) warn(told);
      // Solved ones are forgotten, so a recurrence is reported at once.
      for (const key of warned.keys()) if (!current.has(key)) warned.delete(key);
    },
  };
}
