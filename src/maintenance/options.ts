import { ConfigError } from '../errors.js';
import { FINISHED } from '../job.js';
import { checks } from '../validate.js';
import type { ResolvedPrunerConfig, Retention } from './pruner.js';
import type { PeriodicTask } from './runner.js';

const { checkName, intOption, rejectUnknownKeys } = checks(ConfigError);

const DAY_MS = 86_400_000;
const MAX_RETENTION_MS = 3650 * DAY_MS;

export interface PrunerOptions {
  /** 'archive' (default): move to jobs_history, whose daily partitions are dropped whole. 'delete': delete. */
  mode?: 'archive' | 'delete' | undefined;
  /** Finished jobs stay in the hot table at least this long. Default 60 s. */
  delayMs?: number | undefined;
  /** How often the leader prunes. Default 10 s. */
  intervalMs?: number | undefined;
  /** Rows moved per statement. Default 5000. */
  batchSize?: number | undefined;
  /** Default retention by status, ms. Default: completed 1 day, failed 30 days, cancelled 7 days. */
  retention?: Retention | undefined;
  /** Retention of particular queues, overriding the defaults status by status. */
  queues?: Record<string, Retention> | undefined;
}

export interface MaintenanceOptions {
  /** Lease of the elected maintenance leader. Default min(visibilityTimeoutMs, 15 s). */
  leaseMs?: number | undefined;
  /** Pruning of finished jobs; false: keep them in the jobs table. */
  pruner?: false | PrunerOptions | undefined;
  /** More periodic tasks to run on the leader only (cron ticks, custom clean-ups). */
  tasks?: PeriodicTask[] | undefined;
}

export interface ResolvedMaintenanceConfig {
  leaseMs: number;
  pruner: ResolvedPrunerConfig | undefined;
  tasks: PeriodicTask[];
}

export const DEFAULT_RETENTION: Required<Retention> = { completed: DAY_MS, failed: 30 * DAY_MS, cancelled: 7 * DAY_MS };

function resolveRetention(value: unknown, what: string): Retention {
  if (!value || typeof value !== 'object') throw new ConfigError(`${what} must be an object of { status: ms }`);
  rejectUnknownKeys(value, new Set(FINISHED), what);
  const out: Retention = {};
  for (const status of FINISHED) {
    const ms = (value as Retention)[status];
    if (ms !== undefined) out[status] = intOption(`${what}.${status}`, ms, 0, 0, MAX_RETENTION_MS);
  }
  return out;
}

export function resolvePrunerConfig(options: PrunerOptions = {}): ResolvedPrunerConfig {
  if (typeof options !== 'object' || options === null) throw new ConfigError('pruner must be an object or false');
  rejectUnknownKeys(options, new Set(['mode', 'delayMs', 'intervalMs', 'batchSize', 'retention', 'queues']), 'pruner');
  const mode = options.mode ?? 'archive';
  if (mode !== 'archive' && mode !== 'delete')
    throw new ConfigError(`pruner.mode must be 'archive' or 'delete', got ${String(mode)}`);
  const queues: Record<string, Retention> = {};
  for (const [queue, rule] of Object.entries(options.queues ?? {})) {
    checkName('queue', queue);
    queues[queue] = resolveRetention(rule, `pruner.queues.${queue}`);
  }
  return {
    mode,
    delayMs: intOption('pruner.delayMs', options.delayMs, 60_000, 0, MAX_RETENTION_MS),
    intervalMs: intOption('pruner.intervalMs', options.intervalMs, 10_000, 10, DAY_MS),
    batchSize: intOption('pruner.batchSize', options.batchSize, 5_000, 1, 100_000),
    maxBatches: 20,
    retention: { ...DEFAULT_RETENTION, ...resolveRetention(options.retention ?? {}, 'pruner.retention') },
    queues,
  };
}

/** Validates `maintenance`; undefined means this worker takes no part in maintenance. */
export function resolveMaintenanceConfig(
  options: false | MaintenanceOptions | undefined,
  visibilityTimeoutMs: number,
): ResolvedMaintenanceConfig | undefined {
  if (options === false) return undefined;
  const opts = options ?? {};
  if (typeof opts !== 'object' || opts === null) throw new ConfigError('maintenance must be an object or false');
  rejectUnknownKeys(opts, new Set(['leaseMs', 'pruner', 'tasks']), 'maintenance');
  const tasks = opts.tasks ?? [];
  if (!Array.isArray(tasks)) throw new ConfigError('maintenance.tasks must be an array');
  for (const task of tasks) {
    if (!task || typeof task.run !== 'function' || typeof task.name !== 'string') {
      throw new ConfigError('maintenance.tasks: each task needs a name, an intervalMs and a run(signal) function');
    }
    intOption(`maintenance.tasks.${task.name}.intervalMs`, task.intervalMs, 0, 10, 30 * DAY_MS);
  }
  return {
    leaseMs: intOption('maintenance.leaseMs', opts.leaseMs, Math.min(visibilityTimeoutMs, 15_000), 300, 3_600_000),
    pruner: opts.pruner === false ? undefined : resolvePrunerConfig(opts.pruner),
    tasks,
  };
}
