import type pg from 'pg';
import { checkName, intOption, rejectUnknownKeys, resolveSchema, DEFAULT_QUEUE, type ConnectionOptions } from './config.js';
import { openPool, type PoolHandle } from './db/connection.js';
import { buildQueries, type Queries } from './db/queries.js';
import { rows, type Queryable } from './db/executor.js';
import { ConfigError, ValidationError, wrapDatabaseError } from './errors.js';
import type { JobRow } from './job.js';
import { DEFAULT_MAX_PAYLOAD_BYTES, serializePayload } from './payload.js';

export interface EnqueueOptions {
  /** Queue name. Default 'default'. */
  queue?: string;
  /** Run no earlier than this time. */
  runAt?: Date;
  /** Run no earlier than this many ms from now (server clock). */
  delayMs?: number;
  /** Attempts before the job is marked failed. Default 5. */
  maxAttempts?: number;
  /** Higher runs first among due jobs. Default 0. */
  priority?: number;
  /**
   * Run the INSERT on this connection: your open transaction (a pg Client or
   * PoolClient after BEGIN, or anything with query(text, values)). The job then
   * commits or rolls back with your data.
   */
  tx?: Queryable;
}

export interface JobSpec<P = unknown> extends Omit<EnqueueOptions, 'tx'> {
  task: string;
  payload?: P;
}

export interface QueueOptions extends ConnectionOptions {
  /** Largest payload accepted, in bytes of JSON. Default 1 MiB. */
  maxPayloadBytes?: number;
}

const ENQUEUE_KEYS = new Set(['queue', 'runAt', 'delayMs', 'maxAttempts', 'priority', 'tx']);
const SPEC_KEYS = new Set(['task', 'payload', 'queue', 'runAt', 'delayMs', 'maxAttempts', 'priority']);
const QUEUE_KEYS = new Set(['connectionString', 'pool', 'schema', 'maxPayloadBytes']);

/** The row parameters of one job, validated. */
interface JobValues {
  queue: string;
  task: string;
  payload: string;
  run_at: string | null;
  delay_ms: number;
  max_attempts: number;
  priority: number;
}

/**
 * Adds jobs. Use one per application; pass `tx` to enqueue inside your own
 * transaction so the job exists exactly when your data does.
 *
 * @example
 *   const queue = new Queue({ connectionString: process.env.DATABASE_URL });
 *   const client = await pool.connect();
 *   await client.query('BEGIN');
 *   const { rows } = await client.query('INSERT INTO users(email) VALUES ($1) RETURNING id', [email]);
 *   await queue.enqueue('send_welcome', { userId: rows[0].id }, { tx: client });
 *   await client.query('COMMIT'); // the job exists and idle workers wake now
 */
export class Queue {
  readonly schema: string;
  private readonly queries: Queries;
  private readonly handle: PoolHandle | undefined;
  private readonly maxPayloadBytes: number;

  constructor(options: QueueOptions = {}) {
    rejectUnknownKeys(options, QUEUE_KEYS, 'Queue');
    this.schema = resolveSchema(options.schema);
    this.queries = buildQueries(this.schema);
    this.maxPayloadBytes = intOption('maxPayloadBytes', options.maxPayloadBytes, DEFAULT_MAX_PAYLOAD_BYTES, 2, 256 * 1024 * 1024);
    this.handle = options.pool || options.connectionString ? openPool(options, 10, 'sluice-queue') : undefined;
  }

  /** The pool the Queue uses when no `tx` is given. */
  get pool(): pg.Pool | undefined {
    return this.handle?.pool;
  }

  /** Adds one job and returns its id. Throws ValidationError (nothing inserted) on bad input. */
  async enqueue<P>(task: string, payload?: P, options: EnqueueOptions = {}): Promise<string> {
    const v = validated(() => {
      rejectUnknownKeys(options, ENQUEUE_KEYS, 'enqueue');
      return this.jobValues({ ...options, task, payload, tx: undefined });
    });
    const db = this.executor(options.tx);
    try {
      const [row] = await rows<{ id: string }>(db, this.queries.enqueue, [
        v.queue, v.task, v.payload, v.run_at, v.delay_ms, v.max_attempts, v.priority,
      ]);
      return row!.id;
    } catch (err) {
      throw wrapDatabaseError(err, 'enqueue failed');
    }
  }

  /**
   * Adds many jobs in one statement (one round trip, one wake-up per queue).
   * All or nothing: one invalid spec rejects the whole batch before anything is sent.
   * Returns the ids in the order of `jobs`.
   */
  async enqueueMany(jobs: JobSpec[], options: { tx?: Queryable } = {}): Promise<string[]> {
    if (!Array.isArray(jobs)) throw new ValidationError('enqueueMany: jobs must be an array');
    rejectUnknownKeys(options, new Set(['tx']), 'enqueueMany');
    if (jobs.length === 0) return [];
    const values = jobs.map((spec, i) => {
      try {
        if (!spec || typeof spec !== 'object') throw new ValidationError('not an object');
        return validated(() => {
          rejectUnknownKeys(spec, SPEC_KEYS, 'job');
          return this.jobValues(spec);
        });
      } catch (err) {
        throw new ValidationError(`enqueueMany: job ${i}: ${(err as Error).message}`, { cause: err });
      }
    });
    // Payloads are already JSON text; splice them in rather than parse and re-encode.
    const body = values
      .map((v) => `{"queue":${JSON.stringify(v.queue)},"task":${JSON.stringify(v.task)},"payload":${v.payload},` +
        `"run_at":${JSON.stringify(v.run_at)},"delay_ms":${v.delay_ms},"max_attempts":${v.max_attempts},"priority":${v.priority}}`)
      .join(',');
    try {
      const result = await rows<{ id: string }>(this.executor(options.tx), this.queries.enqueueMany, [`[${body}]`]);
      return result.map((r) => r.id);
    } catch (err) {
      throw wrapDatabaseError(err, 'enqueueMany failed');
    }
  }

  /** Reads one job, or undefined when there is none with that id. */
  async getJob<P = unknown>(id: string | number, options: { tx?: Queryable } = {}): Promise<JobRow<P> | undefined> {
    const [row] = await rows<JobRow<P>>(this.executor(options.tx), this.queries.getJob, [String(id)]);
    return row;
  }

  /** Ends the pool Sluice made (a pool you passed in is left open). */
  async close(): Promise<void> {
    await this.handle?.end();
  }

  private executor(tx: Queryable | undefined): Queryable {
    if (tx) {
      if (typeof tx.query !== 'function') throw new ConfigError('tx must have a query(text, values) method');
      return tx;
    }
    if (!this.handle) throw new ConfigError('this Queue has no connection: pass { tx } or give connectionString/pool');
    return this.handle.pool;
  }

  private jobValues(spec: JobSpec & { tx?: undefined }): JobValues {
    const task = checkName('task', spec.task);
    const queue = checkName('queue', spec.queue ?? DEFAULT_QUEUE);
    if (spec.runAt !== undefined && spec.delayMs !== undefined) {
      throw new ValidationError('give runAt or delayMs, not both');
    }
    let runAt: string | null = null;
    if (spec.runAt !== undefined) {
      if (!(spec.runAt instanceof Date) || Number.isNaN(spec.runAt.getTime())) {
        throw new ValidationError(`runAt must be a valid Date, got ${String(spec.runAt)}`);
      }
      runAt = spec.runAt.toISOString();
    }
    const delayMs = spec.delayMs ?? 0;
    if (typeof delayMs !== 'number' || !Number.isFinite(delayMs) || delayMs < 0) {
      throw new ValidationError(`delayMs must be a finite number >= 0, got ${String(spec.delayMs)}`);
    }
    return {
      queue,
      task,
      payload: serializePayload(spec.payload, this.maxPayloadBytes),
      run_at: runAt,
      delay_ms: delayMs,
      max_attempts: intOption('maxAttempts', spec.maxAttempts, 5, 1, 1000),
      priority: intOption('priority', spec.priority, 0, -32768, 32767),
    };
  }
}

/** A bad job is the caller's input, not configuration: report it as a ValidationError. */
function validated<T>(fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    if (err instanceof ConfigError) throw new ValidationError(err.message, { cause: err });
    throw err;
  }
}
