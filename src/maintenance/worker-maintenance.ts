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
import type { UnknownTask } from '../admin/workers.js';

/** What maintenance reports back to its worker. */
interface MaintenanceSink {
  emit(event: 'leader:elected' | 'leader:lost'): boolean;
  emit(event: 'jobs:pruned', result: PruneResult): boolean;
  emit(event: 'cron:enqueued', ticks: CronTick[]): boolean;
  emit(event: 'tasks:unhandled', tasks: UnknownTask[]): boolean;
}

/** The pruner's own lease: only workers with the pruner on compete for it. */
export const PRUNER_ROLE = 'pruner';

/**
 * A worker's maintenance: the lease and the leader's services (rescuer, grouped
 * queues, the configured extra tasks), unless the worker takes no part in the
 * election; the pruner's lease and the pruner, when its pruner is on; and the
 * services every worker runs (cron, when it has schedules).
 *
 * The pruner has a lease of its own so that the workers that may prune are the
 * ones that do: with it on the leader, a `--no-pruner` worker (a least-privilege
 * role, which may not manage jobs_history's partitions) that won the election left
 * the owner's worker beside it never pruning (outside review 182).
 */
export class WorkerMaintenance {
  constructor(
    private readonly leader: MaintenanceRunner | undefined,
    private readonly pruner: MaintenanceRunner | undefined,
    private readonly everyWorker: readonly ServiceRunner[],
  ) {}

  /** True while this worker is the elected maintenance leader. */
  get isLeader(): boolean {
    return this.leader?.isLeader ?? false;
  }

  /** Joins the election; resolves once the other services are set up (cron's schedules published). */
  async start(): Promise<void> {
    this.leader?.start();
    this.pruner?.start();
    await Promise.all(this.everyWorker.map((s) => s.start()));
  }

  /** Stops every service, waits for the runs in flight, and hands the leases over. */
  async stop(): Promise<void> {
    await Promise.all([this.leader?.stop(), this.pruner?.stop(), ...this.everyWorker.map((s) => s.stop())]);
  }
}

/** Undefined when there is nothing to run: `maintenance: false` and no schedules. */
export function createMaintenance(
  db: Driver,
  config: ResolvedWorkerConfig,
  rescuer: PeriodicTask,
  sink: MaintenanceSink,
  /** Reports an error of one part ('maintenance', or a schedule's ticks). */
  errorIn: (part: string) => (err: unknown) => void,
): WorkerMaintenance | undefined {
  const maintenance = config.maintenance;
  const error = errorIn('maintenance');
  let leader: MaintenanceRunner | undefined;
  let pruner: MaintenanceRunner | undefined;
  if (maintenance) {
    const queries = maintenanceStatements(config.schema);
    const services: MaintenanceService<any>[] = [
      rescuer,
      unknownTasksTask(db, config.schema, config.logger, {}, (tasks) => sink.emit('tasks:unhandled', tasks)),
      groupedQueuesTask(db, config.schema),
      ...maintenance.tasks,
    ];
    leader = new MaintenanceRunner(new Lease(db, queries, config.workerId, maintenance.leaseMs), services);
    leader.on('leader:elected', () => sink.emit('leader:elected'));
    leader.on('leader:lost', () => sink.emit('leader:lost'));
    leader.on('task:error', (_name, err) => error(err));
    leader.on('lease:error', error);
    if (maintenance.pruner) {
      const task = prunerTask(db, queries, maintenance.pruner, (r) => sink.emit('jobs:pruned', r));
      const runner = new MaintenanceRunner(new Lease(db, queries, config.workerId, maintenance.leaseMs, PRUNER_ROLE), [task]);
      runner.on('task:error', (_name, err) => {
        error(prunerError(err));
        // A role that may not prune gives the lease up for good, so that a worker that
        // may (the owner's) takes it: one worker started without --no-pruner held it,
        // failing, while the owner's never pruned (outside review 185).
        if (isInsufficientPrivilege(err)) void runner.stop();
      });
      runner.on('lease:error', error);
      pruner = runner;
    }
  }
  // Every worker with schedules enqueues their ticks, leader or not (a tick still becomes one job).
  const everyWorker =
    config.schedules.length === 0
      ? []
      : [
          new ServiceRunner(
            cronTask(
              db,
              cronStatements(config.schema),
              config.schedules,
              (ticks) => sink.emit('cron:enqueued', ticks),
              // Which schedule's tick failed (outside review 248: "worker maintenance: Client has encountered a connection error").
              (err, schedule) => errorIn(`cron: schedule ${JSON.stringify(schedule)}`)(err),
            ),
            errorIn('cron'),
          ),
        ];
  return leader || everyWorker.length > 0 ? new WorkerMaintenance(leader, pruner, everyWorker) : undefined;
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
      "which only the schema's owner may do; this worker has given up the pruner's lease until it restarts: run it " +
      'with maintenance: { pruner: false } (sluice worker --no-pruner), and a worker connected as the owner with the ' +
      'pruner on)',
    '42501',
    { cause: err },
  );
}
