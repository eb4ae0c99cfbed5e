import { setMaxListeners } from 'node:events';
import { checks, readOrFail, snapshotOptions, unreadable } from './validate.js';
import { hasConnection, poolTooSmallToListen, resolveDriverName, type PgPool } from './db/connection.js';
import type { Driver } from './db/driver.js';
import { openQueueDriver } from './db/drivers/queue-driver.js';
import { enqueueStatements, type EnqueueStatements } from './db/statements/enqueue.js';
import type { SluiceMetrics } from './metrics/metrics.js';
import { preloadTracing, traceEnqueue } from './tracing.js';
import { controlStatements, type ControlStatements } from './db/statements/control.js';
import { listQueueSettings, setQueueConcurrencyLimit, setQueuePaused, type QueueSettings } from './control.js';
import { cancelJob, type CancelJobResult } from './admin/jobs.js';
import { jobId as checkJobId } from './admin/input.js';
import { WakeUps } from './wake-ups.js';
import { callerTransaction, rows, type Queryable } from './db/executor.js';
import { warnIfAutocommitted } from './db/transaction-status.js';
import { afterCommitError, enqueueError } from './enqueue-errors.js';
import { ConfigError, ValidationError, wrapDatabaseError } from './errors.js';
import { type AnyTasks, type JobRow, type TaskMap, type TaskSpec } from './job.js';
import { resolveSchemas, validateStored, validateStoredBatch } from './task-schemas.js';
import { AfterCommitCollector } from './after-commit.js';
import type { StandardSchemaV1 } from './standard-schema.js';
import { OutcomeListener } from './outcome-listener.js';
import { waitForJob } from './wait-for.js';
import { channelFor, preparedName } from './db/identifiers.js';
import { DEFAULT_MAX_PAYLOAD_BYTES } from './payload.js';
import { jobIdOf, jobIdsOf, readInput, toJobValues, withJobDates, type JobValues } from './job-values.js';
import { enqueueBatch } from './enqueue-batch.js';
import {
  ENQUEUE_KEYS,
  QUEUE_KEYS,
  settingOptions,
  SPEC_KEYS,
  txOption,
  type AfterCommitJobs,
  type QueueOptions,
  type TaskArgs,
  type SettingOptions,
  type WaitOptions,
} from './queue-options.js';

export type { AfterCommitJobs, EnqueueArgs, EnqueueOptions, QueueOptions, SettingOptions, WaitOptions } from './queue-options.js';

/** The enqueue statements sent named (prepared once per connection) on the Queue's own pool. */
type PreparedEnqueue = 'enqueue' | 'enqueueDeferred' | 'enqueueMany' | 'enqueueManyUniform';

/** Constructor and waitFor options are the programmer's: ConfigError. Jobs are input: ValidationError. */
const config = checks(ConfigError);
const input = checks(ValidationError);

/**
 * Adds jobs. Use one per application; pass `tx` to enqueue inside your own
 * transaction so the job exists exactly when your data does.
 *
 * @example
 *   const queue = new Queue({ connectionString: process.env.DATABASE_URL });
 *   const client = await pool.connect();
 *   await client.query('BEGIN');
 *   const { rows } = await client.query('insert into users (email) values ($1) returning id', [email]);
 *   await queue.enqueue('send_welcome', { userId: rows[0].id }, { tx: client });
 *   await client.query('COMMIT'); // the job exists and idle workers wake now
 *
 *   // On postgres.js: new Queue({ sql }), and { tx: postgresJsAdapter(tx) } inside sql.begin.
 */
export class Queue<T extends TaskMap = AnyTasks> {
  readonly schema: string;
  private readonly queries: EnqueueStatements;
  private readonly control: ControlStatements;
  /** Where calls without `tx` run, and waitFor LISTENs; undefined when the options gave no connection. */
  private readonly db: Driver | undefined;
  private readonly maxPayloadBytes: number;
  private readonly metrics: SluiceMetrics | undefined;
  private outcomes: OutcomeListener | undefined;
  private readonly wakeUps: WakeUps | undefined;
  /** Enqueues running on this Queue's own pool right now. */
  private ownInFlight = 0;
  private closed = false;
  /** Aborted by close(): waitFor calls in flight end at once. */
  private readonly closing = new AbortController();
  private readonly prepared: boolean;
  private readonly schemas: Map<string, StandardSchemaV1>;
  /** waitFor()'s LISTEN would keep the only client of a pool of yours (see waitFor). */
  private readonly listenStarvesPool: boolean;

  constructor(given: QueueOptions<T> = {}) {
    // Each waitFor in flight listens on it: any number may wait at once (outside
    // review 109: Node warned of a leak at 11).
    setMaxListeners(0, this.closing.signal);
    const options = readOrFail(ConfigError, 'Queue', () => snapshotOptions(given, ConfigError, 'Queue'));
    config.rejectUnknownKeys(options, QUEUE_KEYS, 'Queue');
    this.schema = config.schemaOption(options.schema);
    this.queries = enqueueStatements(this.schema);
    this.control = controlStatements(this.schema);
    this.maxPayloadBytes = config.intOption(
      'maxPayloadBytes',
      options.maxPayloadBytes,
      DEFAULT_MAX_PAYLOAD_BYTES,
      2,
      256 * 1024 * 1024,
    );
    if (options.metrics !== undefined && typeof options.metrics?.enqueued?.inc !== 'function') {
      throw new ConfigError('Queue: metrics must be a SluiceMetrics');
    }
    this.metrics = options.metrics;
    this.prepared = config.boolOption('preparedStatements', options.preparedStatements, true);
    this.schemas = resolveSchemas(options.schemas, 'Queue');
    const statementTimeoutMs = config.intOption('statementTimeoutMs', options.statementTimeoutMs, 30_000, 100, 86_400_000);
    // Checked with no connection too: a tx-only Queue took driver: 'mysql' without a word (outside review 254).
    const driver = resolveDriverName(options, 'Queue');
    this.db = hasConnection(options) ? openQueueDriver(driver, options, statementTimeoutMs) : undefined;
    this.wakeUps = this.db && new WakeUps(this.db, this.queries.wake, channelFor(this.schema));
    this.listenStarvesPool = poolTooSmallToListen(options) !== undefined;
    preloadTracing();
  }

  /** The `pg` Pool the Queue uses when no `tx` is given (yours, or the one it made); undefined on postgres.js. */
  get pool(): PgPool | undefined {
    return this.db && 'pool' in this.db ? (this.db.pool as PgPool) : undefined;
  }

  /** Adds one job and returns its id. Throws ValidationError (nothing inserted) on bad input. */
  async enqueue<K extends keyof T & string>(task: K, ...[payload, options = {}]: TaskArgs<T, K>): Promise<string> {
    // The payload becomes its JSON text now, before any await: that text is checked
    // and inserted, whatever the caller does to the object meanwhile (outside review 223).
    // Each option read once, from one copy: its transaction too, as at the call (outside
    // reviews 225, 226: read again after the check, a changed options object or a getter
    // decided where the job went).
    const given = readInput('enqueue', () => {
      input.rejectUnknownKeys(options, ENQUEUE_KEYS, 'enqueue');
      return { ...options };
    });
    const v = readInput('enqueue', () => toJobValues({ ...given, task, payload }, this.maxPayloadBytes));
    const tx = given.tx;
    const db = this.executor(tx, true);
    // Checked, and stored as given: the worker parses it (see validateStoredBatch).
    if (this.schemas.size > 0) await validateStored(this.schemas, v.task, v.payload, payload);
    const values = [v.queue, v.task, v.payload, v.run_at, v.delay_ms, v.max_attempts, v.priority, v.group_key];
    // Concurrent enqueues on our own pool defer their wake-up past the COMMIT, so
    // their commits are not serialised by NOTIFY (migration 0004). A lone enqueue
    // keeps the trigger's NOTIFY, which reaches workers a round trip sooner.
    const deferWakeUp = !tx && v.job_key === null && this.ownInFlight > 0;
    if (!tx) this.ownInFlight++;
    try {
      // Keyed jobs go through enqueue_job(), which carries no trace context.
      const id = await traceEnqueue(v.queue, v.task, 1, async (traceContext) => {
        if (deferWakeUp) {
          const [row] = await this.insert<{ id: string; run_at_ms: number }>(
            db,
            'enqueueDeferred',
            [...values, traceContext],
            v.waitable,
          );
          this.wakeUps!.add(v.queue, row!.run_at_ms);
          return row!.id;
        }
        const [row] =
          v.job_key === null
            ? await this.insert<{ id: string }>(db, 'enqueue', [...values, traceContext], v.waitable)
            : await rows<{ id: string }>(db, this.queries.enqueueKeyed, [
                ...values,
                v.job_key,
                v.job_key_mode,
                v.while_processing,
              ]);
        return jobIdOf(row);
      });
      if (tx) warnIfAutocommitted(tx, 'enqueue: the job was inserted');
      this.metrics?.enqueued.inc({ schema: this.schema, queue: v.queue, task: v.task });
      return id;
    } catch (err) {
      throw enqueueError(err, 'enqueue failed', tx ? 'caller' : 'own', false, v.waitable);
    } finally {
      if (!tx) this.ownInFlight--;
    }
  }

  /**
   * Adds many jobs in one statement (one round trip, one wake-up per queue).
   * All or nothing: one invalid spec rejects the whole batch before anything is sent.
   * Returns the ids in the order of `jobs`.
   */
  async enqueueMany(jobs: TaskSpec<T>[], options: { tx?: Queryable } = {}): Promise<string[]> {
    if (!readInput('enqueueMany', () => Array.isArray(jobs))) throw new ValidationError('enqueueMany: jobs must be an array');
    readInput('enqueueMany', () => input.rejectUnknownKeys(options, new Set(['tx']), 'enqueueMany'));
    const values = readInput('enqueueMany', () =>
      Array.from(jobs, (spec, i) => {
        try {
          if (!spec || typeof spec !== 'object') throw new ValidationError('not an object');
          // Named here: through rejectUnknownKeys it read "job 0: job: unknown option" (outside review 208).
          const unknown = Object.keys(spec).find((key) => !SPEC_KEYS.has(key));
          if (unknown !== undefined) throw new ValidationError(`unknown option "${unknown}"`);
          // A copy: each option read once (outside review 225: a getter gave the check one
          // delayMs and the insert another).
          return toJobValues({ ...spec }, this.maxPayloadBytes);
        } catch (err) {
          const why = err instanceof ValidationError ? err.message : unreadable(err);
          throw new ValidationError(`enqueueMany: job ${i}: ${why}`, { cause: err });
        }
      }),
    );
    if (values.length === 0) return [];
    const tx = options.tx;
    const db = this.executor(tx, true);
    if (this.schemas.size > 0) await validateStoredBatch(this.schemas, values, jobs);
    return this.insertBatch(values, db, tx ? 'caller' : 'own');
  }

  /** Inserts checked jobs in one statement; their ids in order. `committed`: whose commit it is (see enqueueError). */
  private async insertBatch(values: readonly JobValues[], db: Queryable, committed: 'caller' | 'own'): Promise<string[]> {
    const batch = enqueueBatch(values);
    const first = values[0]!;
    const task = values.every((v) => v.task === first.task) ? first.task : undefined;
    try {
      const result = await traceEnqueue(first.queue, task, values.length, (traceContext) =>
        batch.statement === 'enqueueManyKeyed'
          ? rows<{ id: string }>(db, this.queries.enqueueManyKeyed, batch.params(traceContext))
          : this.insert<{ id: string }>(db, batch.statement, batch.params(traceContext), batch.waitable),
      );
      const ids = jobIdsOf(result, values.length);
      if (committed === 'caller') warnIfAutocommitted(db, 'enqueueMany: the jobs were inserted');
      if (this.metrics) for (const v of values) this.metrics.enqueued.inc({ schema: this.schema, queue: v.queue, task: v.task });
      return ids;
    } catch (err) {
      throw enqueueError(err, 'enqueueMany failed', committed, true, batch.waitable);
    }
  }

  /**
   * Waits until job `id` is finished (completed, failed for good, or cancelled) and
   * returns its row, with `result` and the error history. Woken by a NOTIFY from
   * the statement that finishes the job, sent only because this call asked for it;
   * re-reads the job every `pollIntervalMs` in case a notification is lost.
   * Throws WaitTimeoutError after `timeoutMs` (the job is not affected) and
   * JobNotFoundError for an unknown id. Needs the Queue's own connection (not only `tx`).
   * Waits at most 250 ms for a row lock another session holds (then the job is
   * read every 250 ms until it can be flagged).
   * A read that Postgres does not answer is not retried: it rejects with a
   * ConnectionError, possibly before `timeoutMs` (the job is not affected).
   *
   * @example
   *   const id = await queue.enqueue('resize', { url });
   *   const job = await queue.waitFor(id, { timeoutMs: 30_000 });
   *   if (job.status === 'completed') console.log(job.result);
   */
  async waitFor<P = unknown, R = unknown>(id: string | number, options: WaitOptions = {}): Promise<JobRow<P, R>> {
    config.rejectUnknownKeys(options, new Set(['timeoutMs', 'pollIntervalMs']), 'waitFor');
    const timeoutMs = config.intOption('timeoutMs', options.timeoutMs, 60_000, 0, 2 ** 31 - 1);
    const pollIntervalMs = config.intOption('pollIntervalMs', options.pollIntervalMs, 2_000, 10, 2 ** 31 - 1);
    const jobId = checkJobId(id);
    const db = this.ownDriver();
    if (this.listenStarvesPool) {
      // Outside review 103: the LISTEN kept the pool's one client, and every other call waited for it.
      throw new ConfigError(
        "waitFor: your pool's max is 1, and waitFor's LISTEN would keep that connection until close(): " +
          'give the pool max 2 or more, or the Queue a listenConnectionString',
      );
    }
    this.outcomes ??= new OutcomeListener(db, this.schema);
    return waitForJob<P, R>(jobId, {
      db,
      outcomes: this.outcomes,
      listening: this.outcomes.start(),
      queries: this.queries,
      timeoutMs,
      pollIntervalMs,
      closing: this.closing.signal,
    });
  }

  /**
   * For code that cannot pass its transaction to Sluice (a library without an
   * adapter, a transaction opened deep inside other code): runs `work`, where jobs
   * are only collected (and validated, so a bad one fails your transaction), and
   * enqueues them in one statement once `work` has resolved, i.e. after your
   * transaction committed. If `work` throws, nothing is enqueued.
   *
   * Weaker than `{ tx }`: if the process dies (or Postgres is unreachable)
   * between your commit and this enqueue, your data is committed and the jobs are
   * lost. Prefer `{ tx }` or an adapter whenever you can.
   *
   * @example
   *   const { result: user } = await queue.enqueueAfterCommit(async (jobs) =>
   *     db.transaction(async (tx) => {
   *       const user = await tx.users.create({ email });
   *       await jobs.enqueue('send_welcome', { userId: user.id });
   *       return user;
   *     }));
   */
  async enqueueAfterCommit<R>(work: (jobs: AfterCommitJobs<T>) => Promise<R>): Promise<{ result: R; jobIds: string[] }> {
    if (typeof work !== 'function') throw new ValidationError('enqueueAfterCommit: work must be a function'); // review 179
    // Before work() commits anything: a Queue without a connection (or closed) can never insert
    // the jobs, and after the caller's commit it lost them every time (outside review 227).
    this.ownDriver();
    const collector = new AfterCommitCollector<T>(this.schemas, this.maxPayloadBytes);
    // Inside an async function: a work() that throws before its first await ends collecting too.
    const result = await (async () => work(collector.jobs))().finally(() => collector.stop());
    const values = await collector.collected();
    try {
      return { result, jobIds: values.length === 0 ? [] : await this.insertBatch(values, this.ownDriver(), 'own') };
    } catch (err) {
      throw afterCommitError(err, values.length);
    }
  }

  /** Reads one job, or undefined when there is none with that id. */
  async getJob<P = unknown, R = unknown>(
    id: string | number,
    options: { tx?: Queryable } = {},
  ): Promise<JobRow<P, R> | undefined> {
    const db = this.executor(txOption(options, 'getJob'));
    const jobId = checkJobId(id);
    try {
      const [row] = await rows<JobRow<P, R>>(db, this.queries.getJob, [jobId]);
      return withJobDates(row);
    } catch (err) {
      throw wrapDatabaseError(err, 'getJob failed');
    }
  }

  /**
   * Cancels a job that has not finished: a pending job never runs; a running job's
   * AbortSignal fires on the worker that runs it and the job ends 'cancelled', not
   * retried. A job that does not exist or already finished is refused
   * (`{ ok: false, reason }`). Same as the admin API's cancelJob; `actor` goes to
   * the job's audit log. Other option names are refused: a misspelt `tx` would
   * cancel outside the caller's transaction (outside review 75).
   *
   * @example
   *   const result = await queue.cancel(id);
   *   if (result.ok && result.previousStatus === 'processing') console.log('its worker was told to stop');
   */
  async cancel(id: string | number, options: SettingOptions = {}): Promise<CancelJobResult> {
    const { tx, actor } = settingOptions(options, 'cancel');
    return cancelJob(this.executor(tx, true), this.schema, id, { actor });
  }

  /**
   * Pauses a queue for all workers, persisted: no worker claims from it until
   * resumeQueue(). Jobs still enqueue; running jobs finish.
   *
   * @example
   *   await queue.pauseQueue('emails'); // e.g. while the mail provider is down
   */
  async pauseQueue(name: string, options: SettingOptions = {}): Promise<QueueSettings> {
    const { tx, actor } = settingOptions(options, 'pauseQueue');
    return setQueuePaused(this.executor(tx, true), this.control, name, true, { actor });
  }

  /** Lets workers claim from a paused queue again (they hear of it at once). */
  async resumeQueue(name: string, options: SettingOptions = {}): Promise<QueueSettings> {
    const { tx, actor } = settingOptions(options, 'resumeQueue');
    return setQueuePaused(this.executor(tx, true), this.control, name, false, { actor });
  }

  /**
   * Sets how many jobs of a queue may run at once across ALL workers (null: no
   * limit). 1 makes a serial queue: one job at a time, in order, cluster-wide.
   *
   * @example
   *   await queue.setQueueConcurrency('ledger', 1);
   */
  async setQueueConcurrency(name: string, limit: number | null, options: SettingOptions = {}): Promise<QueueSettings> {
    const { tx, actor } = settingOptions(options, 'setQueueConcurrency');
    return setQueueConcurrencyLimit(this.executor(tx, true), this.control, name, limit, { actor });
  }

  /** Every queue that has settings (paused or limited, or once was). */
  async listQueues(options: { tx?: Queryable } = {}): Promise<QueueSettings[]> {
    return listQueueSettings(this.executor(txOption(options, 'listQueues')), this.control);
  }

  /** Ends the connections Sluice opened (a pool or `sql` you passed in is left open). */
  async close(): Promise<void> {
    this.closed = true;
    this.closing.abort();
    await this.wakeUps?.settled();
    await this.outcomes?.stop();
    await this.db?.end();
  }

  /**
   * An INSERT of new jobs. On the Queue's own pool it goes out as a named prepared
   * statement: parsed and planned once per connection, which took a quarter off
   * the server CPU of a single enqueue (~440 to ~340 µs, measured back to back).
   * A caller's `tx` gets it unnamed: its connection may sit behind a pooler that
   * does not keep prepared statements.
   */
  private async insert<R>(db: Queryable, statement: PreparedEnqueue, values: unknown[], waitable: boolean): Promise<R[]> {
    const text = (waitable ? this.queries.waitable : this.queries)[statement];
    if (db !== this.db || !this.prepared) return rows<R>(db, text, values);
    const result = await this.db.query<R>(
      text,
      values,
      preparedName(waitable ? `${statement}-waitable` : statement, this.schema),
    );
    return result.rows;
  }

  /**
   * Where a call runs: your `tx`, or the Queue's own connections. `write` for
   * every write (see callerTransaction): a cancel or pause through a detached
   * MikroORM fork or an ended QueryRunner committed though the caller's transaction
   * rolled back (outside review 214); reads may run anywhere.
   */
  private executor(tx: Queryable | undefined, write = false): Queryable {
    if (tx !== undefined) return callerTransaction(tx, write);
    return this.ownDriver();
  }

  private ownDriver(): Driver {
    // Said plainly: pg's own words for it are "Cannot use a pool after calling end on the pool".
    if (this.closed) throw new ConfigError('this Queue is closed (close() was called): make a new Queue, or pass { tx }');
    if (!this.db) throw new ConfigError('this Queue has no connection: pass { tx } or give connectionString, pool or sql');
    return this.db;
  }
}
