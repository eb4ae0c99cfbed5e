import './db/drivers/load-pg.js';
export {
  Queue,
  type EnqueueOptions,
  type QueueOptions,
  type EnqueueArgs,
  type AfterCommitJobs,
  type WaitOptions,
  type SettingOptions,
} from './queue.js';
export type { TaskArgs } from './queue-options.js';
export { Worker, type WorkerEvents } from './worker/worker.js';
export type { CronSchedule } from './maintenance/cron-schedule.js';
export { listSchedules, type CronTick, type ScheduleInfo } from './maintenance/cron.js';
export { deleteSchedule, runScheduleNow } from './admin/schedules.js';
export type { RescuedJob } from './maintenance/rescuer.js';
export type { FetchLoopStats as WorkerStats } from './worker/cycle-stats.js';
export { migrate, type MigrateOptions, type MigrationResult } from './migrate.js';
export type { WorkerOptions } from './worker/options.js';
export type { ConnectionOptions, DriverConnectionOptions, PgPool, PgPoolClient, PgClient } from './db/connection.js';
export type { DriverName } from './db/driver.js';
export type {
  JobRow,
  JobStatus,
  JobContext,
  JobError,
  JobSpec,
  TaskSpec,
  JobKeyMode,
  TaskHandler,
  TaskDefinition,
  TaskList,
  TaskMap,
  AnyTasks,
} from './job.js';
export type { QueueSchemas, WorkerSchemas, TasksOf, TaskInputsOf } from './task-schemas.js';
export type { StandardSchemaV1 } from './standard-schema.js';
export type { Queryable } from './db/executor.js';
export type { BackoffOptions, BackoffShape } from './worker/backoff.js';
export type { QueueSettings } from './control.js';
export { retryDelayMs } from './worker/backoff.js';
export {
  SluiceError,
  ConfigError,
  ValidationError,
  ConnectionError,
  NotSentError,
  DatabaseError,
  MigrationError,
  JobTimeoutError,
  PermanentFailure,
  DuplicateJobError,
  WaitTimeoutError,
  JobNotFoundError,
  Snooze,
  JobCancelledError,
  WorkerStoppingError,
  ListenerError,
  type SluiceErrorCode,
} from './errors.js';
export {
  listJobs,
  getJob,
  retryJob,
  runJobNow,
  cancelJob,
  deleteJob,
  type ListJobsOptions,
  type JobPage,
  type JobActionResult,
  type CancelJobResult,
  getJobAudit,
  allowedActions,
  type JobAction,
  type ActionOptions,
  type AuditEntry,
} from './admin/jobs.js';
export { cancelJobs, retryFailed, deleteFinished, type CancelJobsOptions, type DeleteFinishedOptions } from './admin/bulk.js';
export { searchJobs, type SearchJobsOptions } from './admin/search.js';
export { type ListedJobRow } from './admin/input.js';
export { listDeadLetters, redriveDeadLetters, type RedriveTarget, type RedriveResult } from './admin/dead-letters.js';
export { getStats, getThroughput, type Stats, type QueueStats, type ThroughputPoint } from './admin/stats.js';
export {
  setQueueGroups,
  setQueueRateLimit,
  setGroupSettings,
  listQueueLimits,
  listGroupSettings,
  type RateLimit,
  type QueueLimits,
  type GroupSettings,
  type QueueGroupOptions,
  type GroupOptions,
} from './groups/settings.js';
export { getGroupStats, type GroupStats, type QueueGroupStats } from './admin/groups.js';
export { watchGroups, type GroupMetricsOptions } from './metrics/groups.js';
export { runDoctor, type DoctorOptions, type DoctorReport } from './doctor/run-doctor.js';
export { DEFAULT_THRESHOLDS, type CheckResult, type DoctorThresholds, type Severity } from './doctor/findings.js';
export { prune, type PruneResult, type Retention } from './maintenance/pruner.js';
export { maintenanceStatements as buildMaintenanceQueries } from './db/statements/maintenance.js';
export { resolvePrunerConfig, type MaintenanceOptions, type PrunerOptions } from './maintenance/options.js';
export { currentLeader, type LeaseHolder } from './maintenance/lease.js';
export type { PeriodicTask } from './maintenance/runner.js';
export {
  SluiceMetrics,
  type SluiceMetricsOptions,
  type MetricsRegistry,
  type MetricsCounter,
  type MetricsHistogram,
  type MetricsGauge,
} from './metrics/metrics.js';
export type { WorkerMetricsOptions } from './metrics/options.js';
export type { Logger } from './logger.js';
export {
  Outbox,
  OutboxRelay,
  natsPublisher,
  rabbitMqPublisher,
  outboxLag,
  listOutboxDeadLetters,
  redriveOutboxDeadLetters,
  dropOutboxDeadLetters,
  type OutboxDeadLetter,
  type OutboxDeadLetterTarget,
  type OutboxOptions,
  type OutboxMessage,
  type OutboxPayload,
  type PublishCallOptions,
  type OutboxRelayOptions,
  type OutboxLag,
  type BrokerPublisher,
  type RelayMessage,
  type PublishResult,
  type PublishBatchOptions,
  type NatsPublisherOptions,
  type RabbitMqPublisherOptions,
  type RelayEventMap,
} from './outbox/index.js';
export { RelayMetrics, type RelayMetricsOptions } from './metrics/relay-metrics.js';
