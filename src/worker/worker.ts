import { EventEmitter } from 'node:events';
import { resolveWorkerConfig, type ResolvedWorkerConfig, type WorkerOptions } from './options.js';
import type { Driver } from '../db/driver.js';
import { openDriver } from '../db/drivers/open.js';
import { workerStatements } from '../db/statements/worker.js';
import { channelFor } from '../db/identifiers.js';
import { PgWorkerStore } from '../db/store.js';
import { connectionError } from '../db/connection.js';
import { migrateStatements } from '../db/statements/migrate.js';
import {
  isConnectionFailure,
  isNotMigrated,
  JobCancelledError,
  MigrationError,
  SluiceError,
  wrapDatabaseError,
} from '../errors.js';
import type { AnyTasks, TaskMap } from '../job.js';
import { resolveSchemas } from '../task-schemas.js';
import { Notifier } from '../notify/listener.js';
import type { ControlMessage } from '../notify/codec.js';
import { rescuerTask } from '../maintenance/rescuer.js';
import { createMaintenance, type WorkerMaintenance } from '../maintenance/worker-maintenance.js';
import { Completer } from './completer.js';
import type { Emit, WorkerEvents } from './events.js';
import { FetchLoop, type FetchLoopStats } from './fetch-loop.js';
import { Heartbeat } from './heartbeat.js';
import { instrumentWorker, type Instrumentation } from './instrumentation.js';
import { composeHandlers, payloadSchemas, tracing } from './middleware.js';
import { ProgressWriter } from './progress.js';
import { GroupedQueues } from './grouped-queues.js';
import { QueueState } from './queue-state.js';
import { Dispatcher } from './dispatcher.js';
import { Slots } from './slots.js';
import { WorkerRegistry } from './registry.js';

export type { WorkerEvents } from './events.js';

/** Connections a worker holds besides LISTEN: the fetch loop and heartbeat/rescue. */
// Two cycles in flight (see MAX_CYCLES_IN_FLIGHT) and the heartbeat's and hand-backs' statements.
const POOL_SIZE = 3;

/** The parts a running worker is made of; absent before start(). */
interface Parts {
  db: Driver;
  queueState: QueueState;
  completer: Completer;
  loop: FetchLoop;
  heartbeat: Heartbeat;
  progress: ProgressWriter;
  dispatcher: Dispatcher;
  maintenance: WorkerMaintenance | undefined;
  notifier: Notifier | undefined;
  instrumentation: Instrumentation;
  registry: WorkerRegistry;
}

/**
 * Runs jobs. Uses a fixed handful of connections whatever its concurrency: one for
 * LISTEN, and a pool of three for claims, results and heartbeats.
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
  private readonly options: WorkerOptions;
  private readonly slots: Slots;
  private parts: Parts | undefined;
  private state: 'idle' | 'running' | 'stopping' | 'stopped' = 'idle';
  private stopPromise: Promise<void> | undefined;
  private starting: Promise<void> | undefined;
  /**
   * Keeps Node running while the worker runs: every other timer of the worker is
   * unref'd, so in an outage (no connection left) an idle worker process would
   * otherwise exit by itself.
   */
  private keepAlive: NodeJS.Timeout | undefined;
  private drained: (() => void) | undefined;
  private readonly emitEvent: Emit = (event, ...args) =>
    void (this.emit as (e: string, ...a: unknown[]) => boolean)(event, ...args);

  constructor(options: WorkerOptions<T>) {
    super();
    this.config = resolveWorkerConfig(options as WorkerOptions);
    // Checked here so that bad schemas fail the constructor, not start().
    resolveSchemas(options.schemas, 'Worker');
    this.options = options as WorkerOptions;
    this.slots = new Slots({
      concurrency: this.config.concurrency,
      prefetch: this.config.prefetch,
      queueLimits: this.config.queueConcurrency,
    });
  }

  /** http://host:port where GET /metrics is served, when `metrics.port` was given. */
  get metricsUrl(): string | undefined {
    return this.parts?.instrumentation.metricsUrl;
  }

  /** True while this worker is the elected maintenance leader of its schema. */
  get isLeader(): boolean {
    return this.parts?.maintenance?.isLeader ?? false;
  }

  /** Ids of the jobs whose handlers run right now. */
  get runningJobIds(): string[] {
    return this.slots.runningIds();
  }

  /** Ids of the jobs claimed ahead that wait for a slot (locked to this worker, not started). */
  get waitingJobIds(): string[] {
    return this.slots.waitingIds();
  }

  /** Counters of the fetch loop since start (all zero before start). */
  get stats(): FetchLoopStats {
    return { ...(this.parts?.loop.stats ?? { cycles: 0, claims: 0, emptyClaims: 0, claimed: 0, overlapped: 0 }) };
  }

  /** Starts claiming. Resolves once the worker is running (LISTEN may still be connecting). */
  start(): Promise<void> {
    if (this.state !== 'idle') return Promise.reject(new SluiceError('CONFIG', 'a Worker can be started once'));
    this.state = 'running';
    this.keepAlive = setInterval(() => {}, 2 ** 30);
    this.starting = this.open();
    void this.starting.catch(() => clearInterval(this.keepAlive));
    return this.starting;
  }

  private async open(): Promise<void> {
    const config = this.config;
    let db: Driver;
    try {
      db = await openDriver(
        config.driver,
        {
          ...this.options,
          prepare: config.preparedStatements,
          statementTimeoutMs: config.statementTimeoutMs,
        },
        POOL_SIZE,
        'sluice-worker',
      );
    } catch (err) {
      this.state = 'stopped';
      throw err;
    }
    await this.probe(db);
    try {
      this.parts = await this.assemble(db);
    } catch (err) {
      // A part that cannot be made (a missing optional package, bad schemas):
      // nothing has started, so closing the pool leaves nothing behind.
      this.state = 'stopped';
      await db.end().catch(() => {});
      throw err;
    }
    const { queueState, loop, heartbeat } = this.parts;
    await this.listen();
    await queueState.start();
    // stop() was called while starting: claim nothing; stop() takes it from here.
    if (this.stopPromise) return;
    loop.start();
    heartbeat.start();
    this.parts.registry.start();
    await this.parts.maintenance?.start();
  }

  /** Makes the parts of a running worker on its pool; starts none of them. */
  private async assemble(db: Driver): Promise<Parts> {
    const config = this.config;
    const onError = (err: unknown) => this.reportError(err);
    const store = new PgWorkerStore(db, config.schema, config.workerId, config.preparedStatements);
    const tasks = await composeHandlers(config.tasks, [
      payloadSchemas(resolveSchemas(this.options.schemas, 'Worker')),
      ...(config.tracing ? [tracing] : []),
    ]);

    const completer: Completer = new Completer(store, config, {
      emit: this.emitEvent,
      resultAdded: () => loop.resultAdded(),
      dueAt: (at) => loop.wakeAt(at),
      error: onError,
    });
    // Workers that listen hear of pause/limit changes at once; the timer is the
    // fallback for missed notifications, and the only source for those that poll.
    const queueState = new QueueState(
      store,
      config.queues,
      config.queueConcurrency,
      config.listen ? 30_000 : config.pollIntervalMs,
      () => loop.wake(),
      onError,
    );
    const groupedQueues = new GroupedQueues(
      store,
      (queue) => queueState.claimPlan.plain.includes(queue),
      (queue) => {
        dispatcher.handBackQueue(queue);
        void queueState.refresh().then(() => loop.wake());
      },
      onError,
    );
    const loop: FetchLoop = new FetchLoop(
      store,
      { ...config, tasks: [...config.tasks.keys()] },
      {
        capacity: () => this.slots.capacity(),
        wanted: () => this.slots.wanted(),
        wantedIn: (queue) => this.slots.wantedIn(queue),
        free: () => this.slots.free(),
        claimed: (jobs, roundTripMs) => {
          heartbeat.claimed(
            jobs.map((j) => j.id),
            performance.now() - roundTripMs,
          );
          this.slots.recordRoundTrip(roundTripMs);
          dispatcher.claimed(jobs);
          groupedQueues.claimed(jobs);
        },
      },
      completer,
      () => queueState.claimPlan,
      onError,
    );
    // Finished jobs whose results are not written yet (Postgres unreachable, say)
    // are still this worker's: heartbeat them too, or they would be rescued and run
    // again once the outage outlasts the visibility timeout.
    const heartbeat = new Heartbeat(
      store,
      {
        intervalMs: config.heartbeatIntervalMs,
        renewalTimeoutMs: config.lockRenewalTimeoutMs,
      },
      {
        held: () => [...this.slots.heldIds(), ...completer.ids()],
        lost: (ids) => dispatcher.lockLost(ids),
        unrenewed: (ids) => dispatcher.unrenewed(ids, config.lockRenewalTimeoutMs),
        error: onError,
      },
    );
    const progress = new ProgressWriter(store, config.progressIntervalMs, onError);
    const dispatcher = new Dispatcher(
      this.slots,
      completer,
      progress,
      { tasks, maxResultBytes: config.maxResultBytes },
      {
        emit: this.emitEvent,
        accepting: () => this.state === 'running',
        finished: (job) => {
          // A slot of a limited queue opened: it may be claimable again (the statement
          // that writes this result runs before the limited claims).
          if (config.queueConcurrency.has(job.queue) || queueState.claimPlan.limited.includes(job.queue)) loop.wake();
          if (this.slots.runningCount === 0) this.drained?.();
        },
        error: onError,
      },
    );
    const rescuer = rescuerTask(
      db,
      workerStatements(config.schema),
      config.visibilityTimeoutMs,
      config.rescueIntervalMs,
      (jobs) => {
        for (const job of jobs) this.emit('job:rescue', job);
        this.emit('jobs:rescued', jobs);
        loop.wake();
      },
    );
    return {
      db,
      queueState,
      completer,
      loop,
      heartbeat,
      progress,
      dispatcher,
      maintenance: createMaintenance(db, config, rescuer, this, onError),
      notifier: config.listen ? new Notifier(db, channelFor(config.schema), config.listenCheckIntervalMs) : undefined,
      instrumentation: await instrumentWorker(this, config, db),
      registry: new WorkerRegistry(
        db,
        { ...config, tasks: [...config.tasks.keys()], intervalMs: config.registryIntervalMs },
        onError,
      ),
    };
  }

  /**
   * Stops gracefully: claims nothing more, lets running jobs finish for up to
   * `shutdownTimeoutMs`, then aborts the rest. Every job it claimed and did not
   * finish (aborted, or claimed ahead and never started) goes back to pending
   * without spending its attempt. Writes every buffered result before resolving.
   */
  stop(): Promise<void> {
    if (this.state === 'idle') {
      this.state = 'stopped';
      return Promise.resolve();
    }
    // Called while starting: let start() finish (it claims nothing more), then stop.
    this.stopPromise ??= (async () => {
      await this.starting?.catch(() => {});
      if (this.parts && this.state !== 'stopped') await this.shutdown(this.parts);
      this.state = 'stopped';
      clearInterval(this.keepAlive);
    })();
    return this.stopPromise;
  }

  /**
   * Says at start what is wrong, once: a schema that was never migrated rejects
   * start() (nothing would ever run); Postgres out of reach is reported as an
   * 'error' event naming where it tried, and the worker starts anyway and keeps
   * trying (it may simply be up before its database).
   */
  private async probe(db: Driver): Promise<void> {
    try {
      await db.query(migrateStatements(this.config.schema).probe);
    } catch (err) {
      if (isNotMigrated(err)) {
        this.state = 'stopped';
        await db.end().catch(() => {});
        throw new MigrationError(
          `no Sluice tables in schema "${this.config.schema}": run \`sluice migrate\` ` +
            '(or call migrate()) against this database first, or pass the right schema',
          { cause: err },
        );
      }
      this.reportError(isConnectionFailure(err) ? connectionError(err, this.options.connectionString) : err);
    }
  }

  /** LISTEN for wakes and control messages; resolves once in place (or failed: the notifier retries). */
  private async listen(): Promise<void> {
    const { notifier, loop, queueState } = this.parts!;
    if (!notifier) return;
    notifier.on('wake', (hint) => {
      if (hint.queue === '' || this.config.queues.includes(hint.queue)) loop.notified(hint.runAt);
    });
    notifier.on('control', (message) => this.control(message));
    // Notifications sent while LISTEN was down are lost: re-read queue settings too.
    notifier.on('listening', () => {
      void queueState.refresh();
      loop.wake();
    });
    notifier.on('connectionError', (err) => this.reportError(err));
    // Resolve start() once LISTEN is in place, so a job enqueued right after is
    // pushed, not polled. If Postgres is down, start anyway: the notifier retries.
    const ready = new Promise<void>((resolve) => {
      notifier.once('listening', resolve);
      notifier.once('connectionError', () => resolve());
    });
    notifier.start();
    await ready;
  }

  private async shutdown(parts: Parts): Promise<void> {
    this.state = 'stopping';
    const deadline = Date.now() + Math.max(2_000, this.config.shutdownTimeoutMs);
    // A claim in flight returns jobs too: wait for it before collecting what never started.
    await Promise.race([parts.loop.stopClaiming(), sleepUntil(deadline)]);
    await parts.queueState.stop();
    const notStarted = this.slots.takeWaiting();
    await Promise.all([parts.maintenance?.stop(), parts.notifier?.stop()]);

    if (this.slots.runningCount > 0) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, this.config.shutdownTimeoutMs);
        this.drained = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
    await parts.heartbeat.stop();
    await parts.progress.stop();
    const unfinished = parts.dispatcher.abortAll(new SluiceError('CONFIG', 'worker is shutting down'));
    await parts.loop.drain(deadline);
    await parts.completer.settled();
    const toRelease = [...unfinished, ...notStarted];
    if (toRelease.length > 0) {
      try {
        await parts.completer.release(toRelease, deadline);
      } catch (err) {
        // The rescuer of another worker returns them after the visibility timeout.
        this.reportError(err);
      }
    }
    // Last, so the workers view shows this worker until its jobs are handed back.
    await parts.registry.stop();
    await parts.instrumentation.stop();
    await parts.db.end();
    this.state = 'stopped';
  }

  private control(message: ControlMessage): void {
    // A changed setting may free room (a limit raised) without changing the plan: claim after the read.
    if (message.c === 'queues') void this.parts!.queueState.refresh().then(() => this.parts?.loop.wake());
    else this.parts!.dispatcher.cancel(message.id, new JobCancelledError(`job ${message.id} was cancelled`));
  }

  private reportError(err: unknown): void {
    const wrapped = wrapDatabaseError(err, 'worker');
    if (this.listenerCount('error') > 0) this.emit('error', wrapped);
  }
}

function sleepUntil(deadline: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, deadline - Date.now())).unref());
}
