import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { checkConnection, poolTooSmallToListen, resolveDriverName, type ConnectionOptions } from '../db/connection.js';
import type { DriverName } from '../db/driver.js';
import type { PostgresJsSql } from '../db/drivers/postgres-js.js';
import { ConfigError } from '../errors.js';
import { DEFAULT_QUEUE, type AnyTasks, type TaskList, type TaskMap } from '../job.js';
import { isLogger, safeLogger, type Logger } from '../logger.js';
import { resolveSchedules, type CronSchedule, type ResolvedSchedule } from '../maintenance/cron-schedule.js';
import { resolveMaintenanceConfig, type MaintenanceOptions, type ResolvedMaintenanceConfig } from '../maintenance/options.js';
import { resolveMetricsOptions, type ResolvedMetricsOptions, type WorkerMetricsOptions } from '../metrics/options.js';
import { DEFAULT_MAX_PAYLOAD_BYTES } from '../payload.js';
import type { WorkerSchemas } from '../task-schemas.js';
import { checks, shown } from '../validate.js';
import type { BackoffOptions } from './backoff.js';
import { resolveBackoff, resolveTasks, type ResolvedTask } from './task-options.js';

const { boolOption, checkName, intOption, rejectUnknownKeys, schemaOption } = checks(ConfigError);

export interface WorkerOptions<T extends TaskMap = AnyTasks> extends ConnectionOptions {
  /**
   * 'pg' (node-postgres, the default) or 'postgres.js' (needs the optional
   * `postgres` package). Implied by `pool` (pg) or `sql` (postgres.js).
   */
  driver?: DriverName | undefined;
  /**
   * A postgres.js instance, `postgres(url, options)`, instead of `connectionString`:
   * the worker opens its own connections with the same settings and never ends yours.
   */
  sql?: PostgresJsSql | undefined;
  /** Task name → handler (or { handler, timeoutMs }). Only these tasks are claimed. */
  tasks: TaskList<NoInfer<T>>;
  /**
   * Standard Schemas (zod 3.24+, valibot ...) by task: a payload is validated
   * before its handler runs, which receives the schema's output. A payload that
   * does not fit fails the job at once (PermanentFailure). `T` is inferred from them.
   */
  schemas?: WorkerSchemas<T> | undefined;
  /** Queues to take jobs from. Default ['default']. */
  queues?: string[] | undefined;
  /** Jobs run at once by this worker. Default 10. */
  concurrency?: number | undefined;
  /**
   * Per-queue limits local to this worker: `{ reports: 2 }` runs at most 2 jobs of
   * 'reports' at once here, whatever `concurrency` is. For a limit across all
   * workers, use queue.setQueueConcurrency().
   */
  queueConcurrency?: Record<string, number> | undefined;
  /** Most jobs claimed by one statement. Default 200. */
  batchSize?: number | undefined;
  /**
   * Most jobs claimed ahead of free slots, held (locked and heartbeated) until a
   * slot frees, so fast jobs cost fewer round trips. How many a claim takes ahead
   * is sized to the slots expected to free up within a round trip or two, per task
   * (see Slots), so slow jobs are never held back from idle workers. 0 turns it
   * off. Default: twice batchSize (two cycles in flight, see MAX_CYCLES_IN_FLIGHT).
   */
  prefetch?: number | undefined;
  /** Results of finished jobs wait at most this long to be written in a batch. Default 10 ms. */
  completionFlushMs?: number | undefined;
  /** Fallback poll when no notification arrives. Jittered ±25%. Default 2000 ms. */
  pollIntervalMs?: number | undefined;
  /**
   * After two claims in a row that came back empty, notifications wait this long (doubled
   * with each further empty claim, up to 16×) and are
   * merged into one claim, so many idle workers do not all answer every job
   * (see WakeCooldown). A worker that just claimed something answers at once.
   * 0 turns it off. Default 25 ms.
   */
  wakeCooldownMs?: number | undefined;
  /** A job whose heartbeat is older than this is taken back from its worker. Default 30 s. */
  visibilityTimeoutMs?: number | undefined;
  /** How often running jobs' locks are refreshed. Default visibilityTimeoutMs / 6. */
  heartbeatIntervalMs?: number | undefined;
  /**
   * A job whose lock this worker could not renew for this long (Postgres
   * unreachable, a network partition, its row locked by another session) has its
   * handler aborted (the signal fires; the attempt fails and is retried), before
   * the visibility timeout lets another worker take it. Default 0.75 ×
   * visibilityTimeoutMs; above heartbeatIntervalMs, below visibilityTimeoutMs.
   */
  lockRenewalTimeoutMs?: number | undefined;
  /** How often the maintenance leader looks for jobs with expired locks. Default visibilityTimeoutMs / 2. */
  rescueIntervalMs?: number | undefined;
  /**
   * Most time one of the worker's statements, or opening one of its connections,
   * may take. Past it the connection counts as silent (a dropped NAT entry, a
   * failover that blackholes): it is dropped, the statement fails with a
   * ConnectionError (an 'error' event) and is retried on a new connection.
   * Default 30 s. On a `pool` you pass it bounds the wait for a free client too
   * (NotSentError), not the opening of connections, which is the pool's. Keep it
   * at most visibilityTimeoutMs (a process warning, SLUICE_STATEMENT_TIMEOUT, says when
   * it is above).
   */
  statementTimeoutMs?: number | undefined;
  /**
   * How often the LISTEN connection is checked with a round trip; one not answered
   * within the same time is replaced (an 'error' event). So a LISTEN connection
   * that went silent is replaced within twice this. Default 10 s.
   */
  listenCheckIntervalMs?: number | undefined;
  /** On stop(), how long running jobs may finish before they are aborted. Default 10 s. */
  shutdownTimeoutMs?: number | undefined;
  /** Retry delay policy. Default: 1 s doubling (exponential), capped at 1 h, with jitter. A task's own `backoff` wins. */
  backoff?: BackoffOptions | undefined;
  /** Name of this worker instance, stored in locked_by. Default host:pid:random. */
  workerId?: string | undefined;
  /** Connection for LISTEN when `connectionString`/`pool` go through a transaction-mode pooler. */
  listenConnectionString?: string | undefined;
  /** false: never LISTEN, rely on polling alone (e.g. behind PgBouncer). Default true. */
  listen?: boolean | undefined;
  /**
   * false: send the hot statements (claim cycle, heartbeat) unnamed instead of as
   * named prepared statements. Needed behind a transaction-mode pooler that does
   * not track prepared statements (PgBouncer before 1.21, or max_prepared_statements = 0):
   * there the next transaction may land on a server connection that never saw the
   * PREPARE. Default true (saves planning on every cycle).
   */
  preparedStatements?: boolean | undefined;
  /**
   * Cluster-wide maintenance (rescue of expired locks, pruning of finished jobs,
   * extra periodic tasks), run by one elected worker per schema. false: this
   * worker never takes part (run it elsewhere).
   */
  maintenance?: false | MaintenanceOptions | undefined;
  /** Structured logs of lifecycle, maintenance, failures (jobs at debug). A pino logger fits. Default: silent. */
  logger?: Logger | undefined;
  /** Prometheus metrics, opt-in: `{ port }` serves GET /metrics; `{ collector }` records into yours. */
  metrics?: WorkerMetricsOptions | undefined;
  /** OpenTelemetry spans around handlers when @opentelemetry/api is installed. Default true. */
  tracing?: boolean | undefined;
  /** Handlers' ctx.progress() reports are written at most this often. Default 1000 ms. */
  progressIntervalMs?: number | undefined;
  /**
   * 'delete': a completed job's row is deleted by the statement that records its
   * completion, as graphile-worker does, instead of marked completed (and archived
   * by the pruner later). Less server work and no finished rows to prune; but
   * nothing of a completed job remains (its result, getJob, `stats` and dashboard
   * counts of completed jobs), except for jobs that `queue.waitFor()` is watching,
   * which are kept as today. Failed and cancelled jobs are kept either way. Default 'keep'.
   */
  completedJobs?: 'keep' | 'delete' | undefined;
  /** Largest handler result stored, in bytes of JSON; a larger one fails the job. Default 1 MiB. */
  maxResultBytes?: number | undefined;
  /** Recurring jobs this worker enqueues (see CronSchedule). Default none. */
  schedules?: CronSchedule[] | undefined;
  /** How often this worker refreshes its row in the workers registry (the dashboard's workers view). Default 15 s. */
  registryIntervalMs?: number | undefined;
}

/**
 * A worker's options, checked and with every default filled in. Frozen: nothing
 * changes it after start-up (handlers are wrapped into new entries, see middleware.ts).
 */
export interface ResolvedWorkerConfig {
  readonly schema: string;
  readonly tasks: ReadonlyMap<string, ResolvedTask>;
  readonly queues: string[];
  readonly concurrency: number;
  /** Local per-queue limits (only queues this worker takes jobs from). */
  readonly queueConcurrency: ReadonlyMap<string, number>;
  readonly batchSize: number;
  readonly prefetch: number;
  readonly completionFlushMs: number;
  readonly pollIntervalMs: number;
  readonly wakeCooldownMs: number;
  readonly visibilityTimeoutMs: number;
  readonly heartbeatIntervalMs: number;
  readonly lockRenewalTimeoutMs: number;
  readonly statementTimeoutMs: number;
  readonly listenCheckIntervalMs: number;
  readonly rescueIntervalMs: number;
  readonly shutdownTimeoutMs: number;
  readonly backoff: Readonly<Required<BackoffOptions>>;
  readonly workerId: string;
  readonly listen: boolean;
  readonly preparedStatements: boolean;
  readonly completedJobs: 'keep' | 'delete';
  readonly listenConnectionString: string | undefined;
  /** undefined: this worker takes no part in maintenance. */
  readonly maintenance: ResolvedMaintenanceConfig | undefined;
  readonly logger: Logger | undefined;
  readonly metrics: ResolvedMetricsOptions | undefined;
  readonly tracing: boolean;
  readonly progressIntervalMs: number;
  readonly maxResultBytes: number;
  readonly schedules: readonly ResolvedSchedule[];
  readonly driver: DriverName;
  readonly registryIntervalMs: number;
}

export const WORKER_KEYS: ReadonlySet<string> = new Set([
  'connectionString',
  'pool',
  'sql',
  'driver',
  'schema',
  'schemas',
  'tasks',
  'queues',
  'concurrency',
  'queueConcurrency',
  'batchSize',
  'prefetch',
  'completionFlushMs',
  'pollIntervalMs',
  'wakeCooldownMs',
  'visibilityTimeoutMs',
  'heartbeatIntervalMs',
  'lockRenewalTimeoutMs',
  'statementTimeoutMs',
  'listenCheckIntervalMs',
  'rescueIntervalMs',
  'shutdownTimeoutMs',
  'backoff',
  'workerId',
  'listenConnectionString',
  'listen',
  'preparedStatements',
  'completedJobs',
  'maintenance',
  'logger',
  'metrics',
  'tracing',
  'progressIntervalMs',
  'maxResultBytes',
  'schedules',
  'registryIntervalMs',
]);

/** Local per-queue limits: each a queue this worker serves, from 1 to its concurrency. */
function resolveQueueConcurrency(value: unknown, queues: string[], concurrency: number): Map<string, number> {
  if (value === undefined) return new Map();
  if (!value || typeof value !== 'object' || Array.isArray(value))
    throw new ConfigError('queueConcurrency must be an object of queue → limit');
  const limits = new Map<string, number>();
  for (const [queue, limit] of Object.entries(value)) {
    if (!queues.includes(queue)) throw new ConfigError(`queueConcurrency: "${queue}" is not one of this worker's queues`);
    limits.set(queue, intOption(`queueConcurrency.${queue}`, limit, 0, 1, concurrency));
  }
  return limits;
}

function resolveDriver(options: WorkerOptions): DriverName {
  const driver = resolveDriverName(options, 'Worker');
  if (options.sql) return driver; // a postgres.js instance: its own connection settings
  const max = options.listen === false ? undefined : poolTooSmallToListen(options);
  if (max !== undefined) {
    throw new ConfigError(
      `Worker: your pool's max is ${max}, ` +
        'and LISTEN keeps one of its connections for good: give the pool max 2 or more (3 lets two cycles go out at once), a listenConnectionString, or listen: false',
    );
  }
  checkConnection(options, 'Worker');
  return driver;
}

/** Checks a worker's options (ConfigError naming the option) and fills in the defaults. */
export function resolveWorkerConfig(options: WorkerOptions): ResolvedWorkerConfig {
  if (!options || typeof options !== 'object') throw new ConfigError('Worker: options object required');
  rejectUnknownKeys(options, WORKER_KEYS, 'Worker');
  const driver = resolveDriver(options);
  const queues = options.queues ?? [DEFAULT_QUEUE];
  if (!Array.isArray(queues) || queues.length === 0) throw new ConfigError('Worker: queues must be a non-empty array');
  queues.forEach((q) => checkName('queue', q));

  const visibilityTimeoutMs = intOption('visibilityTimeoutMs', options.visibilityTimeoutMs, 30_000, 1_000, 86_400_000);
  const heartbeatIntervalMs = intOption(
    'heartbeatIntervalMs',
    options.heartbeatIntervalMs,
    Math.floor(visibilityTimeoutMs / 6),
    100,
    visibilityTimeoutMs,
  );
  // Two missed heartbeats must not be enough to lose a job.
  if (heartbeatIntervalMs * 2 > visibilityTimeoutMs) {
    throw new ConfigError('heartbeatIntervalMs must be at most half of visibilityTimeoutMs');
  }
  const batchSize = intOption('batchSize', options.batchSize, 200, 1, 10_000);
  const lockRenewalTimeoutMs = intOption(
    'lockRenewalTimeoutMs',
    options.lockRenewalTimeoutMs,
    Math.floor(visibilityTimeoutMs * 0.75),
    heartbeatIntervalMs + 1,
    visibilityTimeoutMs - 1,
  );
  const concurrency = intOption('concurrency', options.concurrency, 10, 1, 10_000);
  if (options.workerId !== undefined) checkName('workerId', options.workerId);
  const listen = boolOption('listen', options.listen, true);
  // Outside review 129: taken silently, though one of the two is a mistake.
  if (!listen && options.listenConnectionString !== undefined) {
    throw new ConfigError('Worker: listenConnectionString is for LISTEN, and listen is false: give one or the other');
  }
  const completedJobs = options.completedJobs === undefined ? 'keep' : options.completedJobs;
  if (completedJobs !== 'keep' && completedJobs !== 'delete') {
    throw new ConfigError(`completedJobs must be 'keep' or 'delete', got ${shown(completedJobs)}`);
  }

  return Object.freeze({
    schema: schemaOption(options.schema),
    tasks: resolveTasks(options.tasks),
    queues: [...new Set(queues)],
    concurrency,
    queueConcurrency: resolveQueueConcurrency(options.queueConcurrency, queues, concurrency),
    batchSize,
    prefetch: intOption('prefetch', options.prefetch, Math.min(2 * batchSize, 10_000), 0, 10_000),
    completionFlushMs: intOption('completionFlushMs', options.completionFlushMs, 10, 0, 60_000),
    pollIntervalMs: intOption('pollIntervalMs', options.pollIntervalMs, 2_000, 10, 3_600_000),
    wakeCooldownMs: intOption('wakeCooldownMs', options.wakeCooldownMs, 25, 0, 60_000),
    visibilityTimeoutMs,
    heartbeatIntervalMs,
    lockRenewalTimeoutMs,
    // Left out, kept within the visibility timeout (see warnIfStatementOutlastsLock): a
    // worker given only a short visibility timeout warned at every start (outside review
    // 279). Not under 5 s: a loaded server's statements take seconds, and cut at 1 s
    // they were cancelled and their connections dropped over and over.
    statementTimeoutMs: intOption(
      'statementTimeoutMs',
      options.statementTimeoutMs,
      Math.min(30_000, Math.max(visibilityTimeoutMs, 5_000)),
      100,
      86_400_000,
    ),
    listenCheckIntervalMs: intOption('listenCheckIntervalMs', options.listenCheckIntervalMs, 10_000, 100, 3_600_000),
    rescueIntervalMs: intOption(
      'rescueIntervalMs',
      options.rescueIntervalMs,
      Math.floor(visibilityTimeoutMs / 2),
      100,
      86_400_000,
    ),
    shutdownTimeoutMs: intOption('shutdownTimeoutMs', options.shutdownTimeoutMs, 10_000, 0, 86_400_000),
    backoff: resolveBackoff(options.backoff ?? {}, 'backoff'),
    workerId: options.workerId ?? `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`,
    listen,
    preparedStatements: boolOption('preparedStatements', options.preparedStatements, true),
    completedJobs,
    listenConnectionString: options.listenConnectionString,
    maintenance: resolveMaintenanceConfig(options.maintenance, visibilityTimeoutMs),
    logger: resolveLogger(options.logger),
    metrics: resolveMetricsOptions(options.metrics),
    tracing: boolOption('tracing', options.tracing, true),
    progressIntervalMs: intOption('progressIntervalMs', options.progressIntervalMs, 1_000, 10, 3_600_000),
    maxResultBytes: intOption('maxResultBytes', options.maxResultBytes, DEFAULT_MAX_PAYLOAD_BYTES, 2, 256 * 1024 * 1024),
    schedules: Object.freeze(resolveSchedules(options.schedules)),
    driver,
    registryIntervalMs: intOption('registryIntervalMs', options.registryIntervalMs, 15_000, 100, 3_600_000),
  });
}

function resolveLogger(logger: unknown): Logger | undefined {
  if (logger === undefined) return undefined;
  if (!isLogger(logger)) throw new ConfigError('logger must have debug, info, warn and error methods (a pino logger fits)');
  return safeLogger(logger);
}

const STOP_KEYS = new Set(['exiting', 'failRunning']);

/** Worker.stop()'s options, checked: whether the process exits right after the stop. */
export function resolveStopOptions(options: { exiting?: boolean; failRunning?: Error }): {
  exiting: boolean;
  failRunning: Error | undefined;
} {
  rejectUnknownKeys(options, STOP_KEYS, 'stop');
  const { failRunning } = options;
  if (failRunning !== undefined && !(failRunning instanceof Error)) {
    throw new ConfigError(`stop: failRunning must be an Error, got ${shown(failRunning)}`);
  }
  const exiting = boolOption('exiting', options.exiting, false);
  // Their failures are written at the deadline, while a handler that ignores its
  // signal may run on: only a process that ends right after may leave it so.
  if (failRunning && !exiting)
    throw new ConfigError('stop: failRunning is for a process that exits right after: give exiting: true too');
  return { exiting, failRunning };
}

let warnedStatementTimeout = false;

/**
 * Says, once per process, when a statement may wait longer than a lock lasts: a
 * network gone silent for a few seconds then holds the worker's claims and result
 * writes past the visibility timeout, the rescuer takes their jobs, and finished
 * results are dropped (outside review 247: visibilityTimeoutMs 6000 with the default
 * 30 s limit, a 5 s drop idled the worker for 40 s and ran 10 finished jobs again).
 * A warning, not an error: the README's advice, and earlier releases took it.
 */
export function warnIfStatementOutlastsLock(
  config: Pick<ResolvedWorkerConfig, 'statementTimeoutMs' | 'visibilityTimeoutMs'>,
): void {
  if (warnedStatementTimeout || config.statementTimeoutMs <= config.visibilityTimeoutMs) return;
  warnedStatementTimeout = true;
  process.emitWarning(
    `Worker: statementTimeoutMs (${config.statementTimeoutMs}) is above visibilityTimeoutMs ` +
      `(${config.visibilityTimeoutMs}): a statement held by a silent network can outlast its jobs' locks, and the ` +
      'rescuer take them while their results wait. Give statementTimeoutMs a value below visibilityTimeoutMs',
    { code: 'SLUICE_STATEMENT_TIMEOUT' },
  );
}
