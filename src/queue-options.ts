import type { DriverConnectionOptions } from './db/connection.js';
import { knownOptions } from './admin/input.js';
import type { Queryable } from './db/executor.js';
import type { AnyTasks, JobOptions, TaskMap } from './job.js';
import type { SluiceMetrics } from './metrics/metrics.js';
import type { QueueSchemas } from './task-schemas.js';

/** Options of `enqueue`: how the job is enqueued, and on which connection. */
export interface EnqueueOptions extends JobOptions {
  /**
   * Run the INSERT on this connection: your open transaction (a pg Client or
   * PoolClient after BEGIN, or anything with query(text, values)). The job then
   * commits or rolls back with your data.
   */
  tx?: Queryable;
}

/** Payload and options of `enqueue`: the payload may be left out only when its type allows undefined. */
export type EnqueueArgs<P> = undefined extends P
  ? [payload?: P, options?: EnqueueOptions]
  : [payload: P, options?: EnqueueOptions];

type UnionToIntersection<U> = (U extends unknown ? (x: U) => void : never) extends (x: infer I) => void ? I : never;
type IsUnion<K> = [K] extends [UnionToIntersection<K>] ? false : true;

/**
 * EnqueueArgs of one task of a typed map. A union of names (a variable typed
 * 'a' | 'b') is refused: its payload was checked against the union of their
 * payloads, so `{ name }` for task 'a' compiled, and an optional payload of one made
 * all of them optional (outside review 207). An untyped Queue takes any name.
 */
export type TaskArgs<T, K extends keyof T> = string extends keyof T
  ? EnqueueArgs<T[K]>
  : IsUnion<K> extends true
    ? [payload: 'enqueue() checks one task name at a time: narrow the union of names first', options?: EnqueueOptions]
    : EnqueueArgs<T[K]>;

/** What the callback of `enqueueAfterCommit` adds jobs through. */
export interface AfterCommitJobs<T extends TaskMap = AnyTasks> {
  /** Validates the job now (so a bad one fails your transaction), enqueues it after your callback returns. */
  enqueue<K extends keyof T & string>(task: K, ...args: TaskArgs<T, K>): Promise<void>;
}

/**
 * Where the Queue connects when a call passes no `tx`: `connectionString`, your
 * `pg` Pool, or your postgres.js `sql` (with `driver`). All optional if every
 * call passes `tx`.
 */
export interface QueueOptions<T extends TaskMap = AnyTasks> extends DriverConnectionOptions {
  /**
   * Standard Schemas (zod 3.24+, valibot ...) by task: enqueue validates the
   * payload and stores it as given (its input, not the schema's output: the
   * worker parses it again before the handler runs); an invalid one is a
   * ValidationError and nothing is inserted. `T` is inferred from them.
   */
  schemas?: QueueSchemas<T> | undefined;
  /** Largest payload accepted, in bytes of JSON. Default 1 MiB. */
  maxPayloadBytes?: number | undefined;
  /** Count enqueued jobs into these Prometheus metrics (see SluiceMetrics). */
  metrics?: SluiceMetrics | undefined;
  /**
   * Default true: enqueues on the Queue's own pool are named prepared statements.
   * `false` behind a transaction-mode pooler that does not keep them (PgBouncer
   * before 1.21, or `max_prepared_statements = 0`). Calls with `tx` never use them.
   */
  preparedStatements?: boolean | undefined;
  /**
   * waitFor()'s LISTEN connection goes here instead of `connectionString`: a direct
   * connection to Postgres when `connectionString` points at a transaction-mode
   * pooler (PgBouncer), where LISTEN does not work (waiters then only poll).
   */
  listenConnectionString?: string | undefined;
  /**
   * Longest a statement on the Queue's own connections (not `tx`) may go unanswered,
   * and connecting may take: past it the statement is cancelled, its connection
   * dropped and the call rejects with a ConnectionError. A network gone silent
   * otherwise held an enqueue, and close(), for as long as TCP kept the
   * connection (review 64). Default 30 s.
   */
  statementTimeoutMs?: number | undefined;
}

export interface WaitOptions {
  /** Give up after this many ms with a WaitTimeoutError. Default 60000. */
  timeoutMs?: number | undefined;
  /** Re-read the job this often in case a notification was missed. Default 2000 ms. */
  pollIntervalMs?: number | undefined;
}

/** Options of the Queue's queue settings: the caller's transaction, and who acts (audit log; default 'api'). */
export interface SettingOptions {
  tx?: Queryable;
  actor?: string;
}

const SETTING_KEYS = new Set(['tx', 'actor']);

/** The options read once, names they do not know refused (outside review 71: `actor` was dropped, `{ bogus: 1 }` taken). */
export function settingOptions(options: SettingOptions, what: string): SettingOptions {
  return knownOptions(options ?? {}, SETTING_KEYS, what) ?? {};
}

const TX_KEYS = new Set(['tx']);

/** The `{ tx }` of a read, other option names refused (outside review 75: `{ trx }` was taken and ignored). */
export function txOption(options: { tx?: Queryable } | undefined, what: string): Queryable | undefined {
  return knownOptions(options ?? {}, TX_KEYS, what)?.tx;
}

/** The options of one job (JobOptions), as enqueue and a batch's jobs take them. */
const JOB_OPTIONS = [
  'queue',
  'runAt',
  'delayMs',
  'maxAttempts',
  'priority',
  'group',
  'waitable',
  'jobKey',
  'jobKeyMode',
  'jobKeyWhileProcessing',
];
/** The option names each takes: others are refused. */
export const ENQUEUE_KEYS = new Set([...JOB_OPTIONS, 'tx']);
export const SPEC_KEYS = new Set(['task', 'payload', ...JOB_OPTIONS]);

export const QUEUE_KEYS = new Set([
  'connectionString',
  'pool',
  'sql',
  'driver',
  'schema',
  'maxPayloadBytes',
  'metrics',
  'schemas',
  'preparedStatements',
  'listenConnectionString',
  'statementTimeoutMs',
]);
