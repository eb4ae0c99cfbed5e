import type { Queryable } from '../db/executor.js';
import type { ResolvedWorkerConfig } from '../worker/options.js';
import { Lease } from './lease.js';
import { prunerTask, type PruneResult } from './pruner.js';
import { maintenanceStatements } from '../db/statements/maintenance.js';
import { MaintenanceRunner, type PeriodicTask } from './runner.js';

/** What the runner reports back to its worker. */
interface MaintenanceSink {
  emit(event: 'leader:elected' | 'leader:lost'): boolean;
  emit(event: 'jobs:pruned', result: PruneResult): boolean;
}

/**
 * The worker's maintenance: the lease, and the leader-only tasks (rescuer, pruner,
 * then the configured extra tasks such as cron ticks). Undefined when the worker
 * was told to take no part (`maintenance: false`).
 */
export function createMaintenance(
  db: Queryable,
  config: ResolvedWorkerConfig,
  rescuer: PeriodicTask,
  sink: MaintenanceSink,
  error: (err: unknown) => void,
): MaintenanceRunner | undefined {
  const maintenance = config.maintenance;
  if (!maintenance) return undefined;
  const queries = maintenanceStatements(config.schema);
  const tasks: PeriodicTask[] = [rescuer];
  if (maintenance.pruner) tasks.push(prunerTask(db, queries, maintenance.pruner, (r) => sink.emit('jobs:pruned', r)));
  tasks.push(...maintenance.tasks);
  const runner = new MaintenanceRunner(new Lease(db, queries, config.workerId, maintenance.leaseMs), tasks);
  runner.on('leader:elected', () => sink.emit('leader:elected'));
  runner.on('leader:lost', () => sink.emit('leader:lost'));
  runner.on('task:error', (_name, err) => error(err));
  runner.on('lease:error', error);
  return runner;
}
