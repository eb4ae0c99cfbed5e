import { EventEmitter } from 'node:events';
import { resolveWorkerConfig, type ResolvedWorkerConfig, type WorkerOptions } from './options.js';
import type { Driver } from '../db/driver.js';
import { openDriver } from '../db/drivers/open.js';
import { workerStatements, type WorkerStatements } from '../db/statements/worker.js';
import { channelFor } from '../db/identifiers.js';
import { JobCancelledError, SluiceError, wrapDatabaseError, type Snooze } from '../errors.js';
import type { AnyTasks, JobRow, TaskMap } from '../job.js';
import { resolveSchemas, withPayloadSchema } from '../task-schemas.js';
import { Notifier, type ControlMessage } from '../notify/listener.js';
import { rescuerTask, type RescuedJob } from '../maintenance/rescuer.js';
import { createMaintenance } from '../maintenance/worker-maintenance.js';
import { instrumentWorker, type Instrumentation } from './instrumentation.js';
import type { MaintenanceRunner } from '../maintenance/runner.js';
import type { PruneResult } from '../maintenance/pruner.js';
import { CronRunner, type CronTick } from '../maintenance/cron.js';
import { serializePayload } from '../payload.js';
import { ProgressWriter } from './progress.js';
import { retryDelayMs } from './backoff.js';
import { describeError, RunningJob, type Outcome } from './executor.js';
import { Heartbeat } from './heartbeat.js';
import { Producer, type ProducerStats } from './producer.js';
import { QueueState } from './queue-state.js';
import { ResultBuffer, type ResultBatch } from './results.js';

/**
 * What a worker reports, for logging and metrics. Every job event's first argument
 * is the job row as claimed; a second one carries what the event is about.
 * Events about results fire once the result is written (so a 'job:complete' job
 * is 'completed' in the database). See README, "Events".
 */
export interface WorkerEvents {
  /** A handler started (attempt = job.attempts). */
  'job:start': [JobRow];
  /** The handler reported progress (written to the job, rate-limited). */
  'job:progress': [JobRow, { progress: unknown }];
  /** Completed; `result` is what the handler returned. */
  'job:complete': [JobRow, { result: unknown; durationMs: number }];
  /** An attempt failed. `willRetry` false means the job is now 'failed' for good (a dead letter). */
  'job:fail': [JobRow, { error: unknown; willRetry: boolean; durationMs: number }];
  /** Follows 'job:fail' when the job will run again: when, and which attempt comes next. */
  'job:retry': [JobRow, { error: unknown; runAt: Date; nextAttempt: number }];
  /** The job's lock was taken away; this run's result was dropped. */
  'job:lock-lost': [JobRow];
  /** One claim statement returned these jobs (they start next). */
  'jobs:claimed': [JobRow[]];
  /** The maintenance leader took back a job whose worker stopped heartbeating (one event per job). */
  'job:rescue': [RescuedJob];
  /** The job was cancelled while this worker ran it; its handler's signal was aborted. */
  'job:cancel': [JobRow];
  /** The handler threw Snooze: the job is pending again at `runAt`, its attempt not spent. */
  'job:snooze': [JobRow, { runAt: Date }];
  /** Emitted by the maintenance leader only: jobs whose lock expired went back to pending (or failed). */
  'jobs:rescued': [RescuedJob[]];
  /** This worker became the maintenance leader of its schema. */
  'leader:elected': [];
  /** This worker stopped being the leader (lease lost, or stopping). */
  'leader:lost': [];
  /** The leader moved finished jobs out of the hot table. */
  'jobs:pruned': [PruneResult];
  /** A recurring schedule's ticks were enqueued by this worker. */
  'cron:enqueued': [CronTick[]];
  /** A database or connection problem the worker is riding out (it keeps going). */
  error: [SluiceError];
}

/** Prefetch only while jobs take less than this on average (about a loaded round trip). */
const PREFETCH_MAX_RUN_MS = 20;

/** Connections a worker holds besides LISTEN: the fetch loop and heartbeat/rescue. */
const POOL_SIZE = 2;

/**
 * Runs jobs. Uses a fixed handful of connections whatever its concurrency: one for
 * LISTEN, and a pool of two for claims, results and heartbeats.
 *
 * Listen for 'error' (connection trouble it is riding out); like any EventEmitter,
 * an 'error' with no listener would throw.
 *
 * @example
 *   const worker = new Worker({
 *     connectionString: process.env.DATABASE_URL,
 *     tasks: { send_welcome: async ({ userId }, { signal }) => sendMail(userId, { signal }) },
 *     concurrency: 20,
 *   });
 *   worker.on('error', (err) => console.error(err.message));
 *   await worker.start();
 *   process.on('SIGTERM', () => worker.stop());
 */
export class Worker<T extends TaskMap = AnyTasks> extends EventEmitter<WorkerEvents> {
  readonly config: ResolvedWorkerConfig;
  private readonly queries: WorkerStatements;
  private readonly options: WorkerOptions;
  private readonly running = new Map<string, RunningJob>();
  /** Moving average of job run time (ms); undefined until a job has finished. */
  private averageRunMs: number | undefined;
  /** Claimed (prefetched) jobs waiting for a free slot, in claim order. */
  private readonly waiting = new Map<string, JobRow>();
  private readonly buffer = new ResultBuffer();
  private db: Driver | undefined;
  private producer: Producer | undefined;
  private notifier: Notifier | undefined;
  private heartbeat: Heartbeat | undefined;
  private maintenance: MaintenanceRunner | undefined;
  private instrumentation: Instrumentation | undefined;
  private progress: ProgressWriter | undefined;
  private cron: CronRunner | undefined;
  private queueState: QueueState | undefined;
  /** Snooze writes in flight; stop() waits for them. */
  private readonly snoozes = new Set<Promise<void>>();
  private state: 'idle' | 'running' | 'stopping' | 'stopped' = 'idle';
  private stopPromise: Promise<void> | undefined;
  private drained: (() => void) | undefined;

  constructor(options: WorkerOptions<T>) {
    super();
    this.config = resolveWorkerConfig(options as WorkerOptions);
    const schemas = resolveSchemas(options.schemas, 'Worker');
    // One schemas object may serve the whole application: tasks this worker does not handle are skipped.
    for (const [task, resolved] of this.config.tasks) {
      if (schemas.has(task)) resolved.handler = withPayloadSchema(schemas, task, resolved.handler);
    }
    this.options = options as WorkerOptions;
    this.queries = workerStatements(this.config.schema);
  }

  /** http://host:port where GET /metrics is served, when `metrics.port` was given. */
  get metricsUrl(): string | undefined {
    return this.instrumentation?.metricsUrl;
  }

  /** True while this worker is the elected maintenance leader of its schema. */
  get isLeader(): boolean {
    return this.maintenance?.isLeader ?? false;
  }

  /** Ids of the jobs running right now. */
  get runningJobIds(): string[] {
    return [...this.running.keys()];
  }

  /** Ids of every job this worker holds the lock of: running, or prefetched and waiting. */
  private get heldJobIds(): string[] {
    return [...this.running.keys(), ...this.waiting.keys()];
  }

  /** Counters of the fetch loop since start (all zero before start). */
  get stats(): ProducerStats {
    return { ...(this.producer?.stats ?? { cycles: 0, claims: 0, emptyClaims: 0, claimed: 0 }) };
  }

  /** Starts claiming. Resolves once the worker is running (LISTEN may still be connecting). */
  async start(): Promise<void> {
    if (this.state !== 'idle') throw new SluiceError('CONFIG', 'a Worker can be started once');
    this.state = 'running';
    const config = this.config;
    let db: Driver;
    try {
      db = await openDriver(config.driver, { ...this.options, prepare: config.preparedStatements }, POOL_SIZE, 'sluice-worker');
    } catch (err) {
      this.state = 'stopped';
      throw err;
    }
    this.db = db;
    const onError = (err: unknown) => this.reportError(err);

    // Workers that listen hear of pause/limit changes at once; the timer is the
    // fallback for missed notifications, and the only source for those that poll.
    this.queueState = new QueueState(db, this.queries, config.queues, config.queueConcurrency,
      config.listen ? 30_000 : config.pollIntervalMs, () => this.producer?.wake(), onError);
    this.producer = new Producer(db, this.queries, config, this.buffer, {
      capacity: () => this.capacity(),
      freeSlots: () => this.capacity() - this.running.size - this.waiting.size,
      freeSlotsIn: (queue) => this.freeSlotsIn(queue),
      claimPlan: () => this.queueState!.claimPlan,
      claimed: (jobs) => {
        this.emit('jobs:claimed', jobs);
        for (const job of jobs) this.waiting.set(job.id, job);
        this.startWaiting();
      },
      applied: (batch, completed, failed) => this.applied(batch, completed, failed),
      error: onError,
    });
    // Finished jobs whose results are not written yet (Postgres unreachable, say)
    // are still this worker's: heartbeat them too, or they would be rescued and run
    // again once the outage outlasts the visibility timeout.
    this.heartbeat = new Heartbeat(db, this.queries, config.workerId, config.heartbeatIntervalMs,
      config.preparedStatements ? `sluice-heartbeat-${config.schema}` : undefined,
      () => [...this.heldJobIds, ...this.buffer.ids()], (ids) => this.lockLost(ids), onError);
    const rescuer = rescuerTask(db, this.queries, config.visibilityTimeoutMs, config.rescueIntervalMs, (jobs) => {
      for (const job of jobs) this.emit('job:rescue', job);
      this.emit('jobs:rescued', jobs);
      this.producer?.wake();
    });
    this.maintenance = createMaintenance(db, config, rescuer, this, onError);
    this.progress = new ProgressWriter(db, this.queries, config.workerId, config.progressIntervalMs, onError);
    if (config.schedules.length > 0) {
      this.cron = new CronRunner(db, config.schema, config.schedules, (ticks) => this.emit('cron:enqueued', ticks), onError);
    }

    this.instrumentation = await instrumentWorker(this, config, db);

    if (config.listen) {
      this.notifier = new Notifier(db, channelFor(config.schema));
      this.notifier.on('wake', (hint) => {
        if (hint.queue === '' || config.queues.includes(hint.queue)) this.producer?.wakeAt(hint.runAt);
      });
      this.notifier.on('control', (message) => this.control(message));
      // Notifications sent while LISTEN was down are lost: re-read queue settings too.
      this.notifier.on('listening', () => void this.queueState?.refresh());
      this.notifier.on('connectionError', onError);
      // Resolve start() once LISTEN is in place, so a job enqueued right after is
      // pushed, not polled. If Postgres is down, start anyway: the notifier retries.
      const ready = new Promise<void>((resolve) => {
        this.notifier!.once('listening', resolve);
        this.notifier!.once('connectionError', () => resolve());
      });
      this.notifier.start();
      await ready;
    }
    await this.queueState.start();
    this.producer.start();
    this.heartbeat.start();
    this.maintenance?.start();
    await this.cron?.start();
  }

  /**
   * Stops gracefully: claims nothing more, lets running jobs finish for up to
   * `shutdownTimeoutMs`, then aborts the rest and returns them to pending without
   * spending their attempt. Writes every buffered result before resolving.
   */
  stop(): Promise<void> {
    // Never started, or start() failed before anything ran.
    if (this.state === 'idle' || !this.db) {
      this.state = 'stopped';
      return Promise.resolve();
    }
    this.stopPromise ??= this.shutdown();
    return this.stopPromise;
  }

  private async shutdown(): Promise<void> {
    this.state = 'stopping';
    this.producer!.stop();
    this.queueState!.stop();
    // Prefetched jobs never started: they go back with the unfinished ones below.
    const notStarted = [...this.waiting.values()];
    this.waiting.clear();
    await Promise.all([this.maintenance?.stop(), this.notifier?.stop(), this.cron?.stop()]);

    if (this.running.size > 0) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, this.config.shutdownTimeoutMs);
        this.drained = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
    this.heartbeat!.stop();
    await this.progress!.stop();
    const unfinished = [...this.running.values()];
    for (const job of unfinished) job.abort('shutdown', new SluiceError('CONFIG', 'worker is shutting down'));
    const deadline = Date.now() + Math.max(2_000, this.config.shutdownTimeoutMs);
    await this.producer!.drain(deadline);
    await Promise.all(this.snoozes);
    const toRelease = [...unfinished.map((j) => j.job.id), ...notStarted.map((j) => j.id)];
    if (toRelease.length > 0) {
      try {
        const { rows } = await this.db!.query<{ id: string; queue: string }>(this.queries.release, [
          this.config.workerId,
          toRelease,
        ]);
        const queues = [...new Set(rows.map((r) => r.queue))];
        if (queues.length > 0) await this.db!.query(this.queries.notify, [channelFor(this.config.schema), queues]);
      } catch (err) {
        // The rescuer of another worker returns them after the visibility timeout.
        this.reportError(err);
      }
    }
    this.running.clear();
    await this.instrumentation?.stop();
    await this.db!.end();
    this.state = 'stopped';
  }

  /**
   * Jobs this worker may hold: its slots, plus the prefetch while its jobs are
   * fast. A prefetched job waits for a slot, so prefetching only pays when that
   * wait is shorter than the round trip it saves; for slow jobs it would keep jobs
   * from idle workers. Until a job has finished, the speed is unknown: no prefetch.
   */
  private capacity(): number {
    const fast = this.averageRunMs !== undefined && this.averageRunMs < PREFETCH_MAX_RUN_MS;
    return this.config.concurrency + (fast ? this.config.prefetch : 0);
  }

  /** Starts prefetched jobs while slots are free (not once the worker is stopping). */
  private startWaiting(): void {
    if (this.state !== 'running') return;
    for (const job of this.waiting.values()) {
      if (this.running.size >= this.config.concurrency) return;
      this.waiting.delete(job.id);
      this.run(job);
    }
  }

  private run(job: JobRow): void {
    const task = this.config.tasks.get(job.task);
    if (!task) return; // cannot happen: the claim filters on known tasks
    const running = new RunningJob(job, task, (value) => this.reportProgress(job, value));
    this.running.set(job.id, running);
    this.emit('job:start', job);
    void running.run().then((outcome) => this.finished(running, outcome));
  }

  private finished(running: RunningJob, outcome: Outcome): void {
    const { job } = running;
    if (this.running.get(job.id) !== running) return;
    this.running.delete(job.id);
    this.startWaiting();
    const attempt = running.attempt;
    const durationMs = performance.now() - running.startedAt;
    this.averageRunMs = this.averageRunMs === undefined ? durationMs : 0.9 * this.averageRunMs + 0.1 * durationMs;
    if (outcome.kind === 'completed') {
      let result: string | null;
      try {
        result = outcome.value === undefined ? null : serializePayload(outcome.value, this.config.maxResultBytes, 'result');
      } catch (error) {
        // A result that cannot be stored would be lost: fail the job instead (no
        // retry would change what the handler returns).
        outcome = { kind: 'failed', error, permanent: true };
      }
      if (outcome.kind === 'completed') {
        this.buffer.complete({ job, attempt, result: result!, durationMs });
        this.producer!.resultAdded();
      }
    }
    if (outcome.kind === 'failed') {
      // The task's retry policy, when it has one, wins over the job's max_attempts.
      const { task } = running;
      const maxAttempts = task.maxAttempts ?? job.max_attempts;
      this.buffer.fail({
        job,
        attempt,
        error: outcome.error,
        errorText: describeError(outcome.error),
        delayMs: retryDelayMs(attempt, task.backoff ?? this.config.backoff),
        permanent: outcome.permanent || attempt >= maxAttempts,
        durationMs,
      });
      this.producer!.resultAdded();
    } else if (outcome.kind === 'snoozed') {
      this.snooze(job, outcome.snooze);
    } else if (outcome.kind === 'cancelled') {
      this.emit('job:cancel', job);
    }
    // A slot of a limited queue opened: it may be claimable again (the statement
    // that writes this result runs before the limited claims).
    if (this.config.queueConcurrency.has(job.queue) || this.queueState!.claimPlan.limited.includes(job.queue)) {
      this.producer!.wake();
    }
    // 'released' jobs are returned by shutdown; 'lost' ones belong to someone else now.
    if (this.running.size === 0) this.drained?.();
  }

  private applied(batch: ResultBatch, completed: Set<string>, failed: Set<string>): void {
    for (const c of batch.completed) {
      if (!completed.has(c.job.id)) {
        this.emit('job:lock-lost', c.job);
        continue;
      }
      const result = c.result == null ? null : (JSON.parse(c.result) as unknown);
      this.emit('job:complete', c.job, { result, durationMs: c.durationMs ?? 0 });
    }
    for (const f of batch.failed) {
      if (!failed.has(f.job.id)) {
        this.emit('job:lock-lost', f.job);
        continue;
      }
      const willRetry = !f.permanent;
      // Other workers find the retry by polling; this one knows when it falls due.
      if (willRetry) this.producer!.wakeAt(Date.now() + f.delayMs);
      this.emit('job:fail', f.job, { error: f.error, willRetry, durationMs: f.durationMs ?? 0 });
      if (willRetry) {
        this.emit('job:retry', f.job, { error: f.error, runAt: new Date(Date.now() + f.delayMs), nextAttempt: f.attempt + 1 });
      }
    }
  }

  /** ctx.progress(): refuse what is not JSON at the call, then write it batched. */
  private reportProgress(job: JobRow, value: unknown): void {
    const json = serializePayload(value, this.config.maxResultBytes, 'progress');
    if (this.running.get(job.id)?.job !== job) return; // reported after the run ended
    this.progress!.report(job.id, json);
    this.emit('job:progress', job, { progress: value });
  }

  /** Jobs of `queue` this worker may still start: its free slots, within the queue's local limit. */
  private freeSlotsIn(queue: string): number {
    // Limited queues are never prefetched: a job held but not running would still
    // count against the queue's limit. Prefetched jobs of other queues take slots.
    const free = this.config.concurrency - this.running.size - this.waiting.size;
    const limit = this.config.queueConcurrency.get(queue);
    if (limit === undefined) return free;
    let held = 0;
    for (const r of this.running.values()) if (r.job.queue === queue) held++;
    for (const job of this.waiting.values()) if (job.queue === queue) held++;
    return Math.min(free, limit - held);
  }

  private control(message: ControlMessage): void {
    if (message.c === 'queues') {
      void this.queueState?.refresh();
      return;
    }
    const running = this.running.get(message.id);
    running?.abort('cancelled', new JobCancelledError(`job ${message.id} was cancelled`));
  }

  /** Back to pending at the snooze time, the attempt not spent. Not batched: snoozes are rare. */
  private snooze(job: JobRow, snooze: Snooze): void {
    const write = (async () => {
      try {
        const { rows } = await this.db!.query<{ run_at: Date }>(this.queries.snooze, [
          this.config.workerId, job.id, job.attempts, snooze.runAt, snooze.delayMs,
        ]);
        if (rows[0]) {
          this.producer!.wakeAt(rows[0].run_at.getTime());
          this.emit('job:snooze', job, { runAt: rows[0].run_at });
        } else {
          this.emit('job:lock-lost', job);
        }
      } catch (err) {
        // The job stays 'processing' until the rescuer returns it (spending the attempt).
        this.reportError(err);
      }
    })();
    this.snoozes.add(write);
    void write.finally(() => this.snoozes.delete(write));
  }

  private lockLost(ids: string[]): void {
    for (const id of ids) {
      const waiting = this.waiting.get(id);
      if (waiting) {
        this.waiting.delete(id);
        this.emit('job:lock-lost', waiting);
        continue;
      }
      const running = this.running.get(id);
      if (!running) continue;
      running.abort('lock-lost', new SluiceError('LOCK_LOST', `job ${id}: lock expired and the job was taken back`));
      this.emit('job:lock-lost', running.job);
    }
  }

  private reportError(err: unknown): void {
    const wrapped = wrapDatabaseError(err, 'worker');
    if (this.listenerCount('error') > 0) this.emit('error', wrapped);
  }
}
