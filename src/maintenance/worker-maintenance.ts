import { DatabaseError, isInsufficientPrivilege } from '../errors.js';
import type { Driver } from '../db/driver.js';
import type { ResolvedWorkerConfig } from '../worker/options.js';
import { Lease } from './lease.js';
import { prunerTask, type PruneResult } from './pruner.js';
import { cronTask, type CronTick } from './cron.js';
import { cronStatements } from '../db/statements/cron.js';
import { maintenanceStatements } from '../db/statements/maintenance.js';
import { MaintenanceRunner, ServiceRunner, type MaintenanceService, type PeriodicTask } from './runner.js';
import { unknownTasksTask } from './unknown-tasks.js';
import { groupedQueuesTask } from './grouped-queues.js';

/** What maintenance reports back to its worker. */
interface MaintenanceSink {
  emit(event: 'leader:elected' | 'leader:lost'): boolean;
  emit(event: 'jobs:pruned', result: PruneResult): boolean;
  emit(event: 'cron:enqueued', ticks: CronTick[]): boolean;
}

/**
 * A worker's maintenance: the lease and the leader's services (rescuer, pruner,
 * grouped queues, the configured extra tasks), unless the worker takes no part in the election;
 * and the services every worker runs (cron, when it has schedules).
 */
export class WorkerMaintenance {
  constructor(
    private readonly leader: MaintenanceRunner | undefined,
    private readonly everyWorker: readonly ServiceRunner[],
  ) {}

  /** True while this worker is the elected maintenance leader. */
  get isLeader(): boolean {
    return this.leader?.isLeader ?? false;
  }

  /** Joins the election; resolves once the other services are set up (cron's schedules published). */
  async start(): Promise<void> {
    this.leader?.start();
    await Promise.all(this.everyWorker.map((s) => s.start()));
  }

  /** Stops every service, waits for the runs in flight, and hands the lease over. */
  async stop(): Promise<void> {
    await Promise.all([this.leader?.stop(), ...this.everyWorker.map((s) => s.stop())]);
  }
}

/** Undefined when there is nothing to run: `maintenance: false` and no schedules. */
export function createMaintenance(
  db: Driver,
  config: ResolvedWorkerConfig,
  rescuer: PeriodicTask,
  sink: MaintenanceSink,
  error: (err: unknown) => void,
): WorkerMaintenance | undefined {
  const maintenance = config.maintenance;
  let leader: MaintenanceRunner | undefined;
  if (maintenance) {
    const queries = maintenanceStatements(config.schema);
    const services: MaintenanceService<any>[] = [rescuer];
    if (maintenance.pruner) services.push(prunerTask(db, queries, maintenance.pruner, (r) => sink.emit('jobs:pruned', r)));
    services.push(unknownTasksTask(db, config.schema, config.logger));
    services.push(groupedQueuesTask(db, config.schema));
    services.push(...maintenance.tasks);
    leader = new MaintenanceRunner(new Lease(db, queries, config.workerId, maintenance.leaseMs), services);
    leader.on('leader:elected', () => sink.emit('leader:elected'));
    leader.on('leader:lost', () => sink.emit('leader:lost'));
    leader.on('task:error', (name, err) => error(name === 'pruner' ? prunerError(err) : err));
    leader.on('lease:error', error);
  }
  // Every worker with schedules enqueues their ticks, leader or not (a tick still becomes one job).
  const everyWorker =
    config.schedules.length === 0
      ? []
      : [
          new ServiceRunner(
            cronTask(db, cronStatements(config.schema), config.schedules, (ticks) => sink.emit('cron:enqueued', ticks), error),
            error,
          ),
        ];
  return leader || everyWorker.length > 0 ? new WorkerMaintenance(leader, everyWorker) : undefined;
}

/**
 * A pruner refused for want of privileges says what to do: the pruner creates and
 * drops jobs_history's partitions, which only the schema's owner may (outside
 * review 157: a sluice_worker role's worker said only "permission denied for schema").
 */
function prunerError(err: unknown): unknown {
  if (!isInsufficientPrivilege(err)) return err;
  return new DatabaseError(
    `worker maintenance: pruner: ${(err as Error).message} (the pruner creates and drops jobs_history partitions, ` +
      "which only the schema's owner may do: run this worker with maintenance: { pruner: false } (sluice worker " +
      '--no-pruner) and prune from a process connected as the owner)',
    '42501',
    { cause: err },
  );
}
