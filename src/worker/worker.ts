import { ListenerSafeEmitter } from '../lifecycle/listener-safe-emitter.js';
import {
  resolveStopOptions,
  resolveWorkerConfig,
  warnIfStatementOutlastsLock,
  type ResolvedWorkerConfig,
  type WorkerOptions,
} from './options.js';
import type { Driver } from '../db/driver.js';
import { openDriver } from '../db/drivers/open.js';
import { connectionError, warnIfPoolShared } from '../db/connection.js';
import { whyNoJobCanRun } from './start-check.js';
import { checkConnectionUrls } from '../db/database-url.js';
import { PgWorkerStore } from '../db/store.js';
import type { WorkerStore } from '../db/worker-store.js';
import { ConfigError, isConnectionFailure, ConnectionError, wrapDatabaseError, connectionErrorIn } from '../errors.js';
import type { AnyTasks, TaskMap } from '../job.js';
import { checkSchedulePayloads, resolveSchemas } from '../task-schemas.js';
import { readOrFail, snapshotOptions } from '../validate.js';
import type { Emit, WorkerEvents } from './events.js';
import type { FetchLoopStats } from './cycle-stats.js';
import { Slots } from './slots.js';
import { assembleParts, type Parts } from './parts.js';
import { pastDeadline, shutDown, stopWindowMs } from './shutdown.js';
import type { ListenProbe } from './listen-probe.js';
import { listenFor } from './listen-wiring.js';

export type { WorkerEvents } from './events.js';

/**
 * Connections a worker holds besides LISTEN: the fetch loop's (up to two cycles in
 * flight, see MAX_CYCLES_IN_FLIGHT; a worker of limited queues alone sends a
 * claim beside a cycle's write), the heartbeat's and the hand-backs'. A statement
 * that finds them all busy waits in the pool for the next one free.
 */
const POOL_SIZE = 3;

/** The statement limit of the stop's last sweep (see spareStore): Postgres answered moments before. */
const SPARE_STATEMENT_MS = 2_000;

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
export class Worker<T extends TaskMap = AnyTasks> extends ListenerSafeEmitter<WorkerEvents> {
  readonly config: ResolvedWorkerConfig;
  private readonly options: WorkerOptions;
  private readonly slots: Slots;
  private parts: Parts | undefined;
  private listenProbe: ListenProbe | undefined;
  private state: 'idle' | 'running' | 'stopping' | 'stopped' = 'idle';
  private stopPromise: Promise<void> | undefined;
  /** Some stop() call said the process exits right after it (read when the stop decides). */
  private exiting = false;
  /** stop({ failRunning }): the error the jobs still running at the deadline fail with. */
  private failRunning: Error | undefined;
  private starting: Promise<void> | undefined;
  /** The driver, once start() has opened it (before its parts are made). */
  private db: Driver | undefined;
  /**
   * Keeps Node running while the worker runs: every other timer of the worker is
   * unref'd, so in an outage (no connection left) an idle worker process would
   * otherwise exit by itself.
   */
  private keepAlive: NodeJS.Timeout | undefined;
  private drained: (() => void) | undefined;
  /** When the first connection error since Postgres was last reachable came (see reachable()). */
  private unreachableSince: number | undefined;
  /**
   * Which connections failed since: the pool's, LISTEN's, or both. 'reconnected' waits
   * for each: with LISTEN on a connection of its own (a direct one beside a pooler), the
   * one coming back said nothing of the other (outside review 129).
   */
  private readonly unreachable = new Set<'pool' | 'listen'>();
  private readonly emitEvent: Emit = (event, ...args) =>
    void (this.emit as (e: string, ...a: unknown[]) => boolean)(event, ...args);

  constructor(given: WorkerOptions<T>) {
    super();
    const options = readOrFail(ConfigError, 'Worker', () => snapshotOptions(given, ConfigError, 'Worker'));
    // Inside readOrFail too: tasks, backoff and the rest are read here, one level down.
    this.config = readOrFail(ConfigError, 'Worker', () => resolveWorkerConfig(options as WorkerOptions));
    // Checked here so that bad schemas and database URLs fail the constructor, as the
    // Queue's do, not start() (outside review 116).
    readOrFail(ConfigError, 'Worker', () => resolveSchemas(options.schemas, 'Worker'));
    checkConnectionUrls(options as WorkerOptions);
    warnIfPoolShared(options as WorkerOptions, this.config.concurrency);
    warnIfStatementOutlastsLock(this.config);
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
    return {
      ...(this.parts?.loop.stats ?? { cycles: 0, claims: 0, emptyClaims: 0, claimed: 0, overlapped: 0, orphansReleased: 0 }),
    };
  }

  /** Starts claiming. Resolves once the worker is running (LISTEN may still be connecting). */
  start(): Promise<void> {
    if (this.state !== 'idle') {
      // Said as it is when stop() came first (outside review 162: "started once" of one never started).
      const why = this.starting ? 'a Worker can be started once' : 'this Worker was stopped before it started';
      return Promise.reject(new ConfigError(`${why}: make a new Worker`));
    }
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
      // A schedule whose payload its task's schema refuses made a dead letter every tick (outside review 221).
      await checkSchedulePayloads(resolveSchemas(this.options.schemas, 'Worker'), config.schedules);
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
    this.db = db;
    await this.probe(db);
    try {
      this.parts = await assembleParts(db, {
        config,
        options: this.options,
        slots: this.slots,
        events: this,
        emit: this.emitEvent,
        // Not once stop() was called, even while start() finishes (review 67: a job started).
        accepting: () => this.state === 'running' && !this.stopPromise,
        drained: () => this.drained?.(),
        error: (err, part) => this.reportError(err, part),
        poolWorks: () => this.reachable('pool'),
      });
    } catch (err) {
      // A part that cannot be made (a missing optional package, bad schemas):
      // nothing has started, so closing the pool leaves nothing behind.
      this.state = 'stopped';
      await db.end().catch(() => {});
      throw err;
    }
    const { queueState, loop, heartbeat } = this.parts;
    try {
      await this.listen();
    } catch (err) {
      // The LISTEN URL's login refused (see listen()): nothing claims yet; close what started.
      this.state = 'stopped';
      await Promise.all([this.parts.notifier?.stop(), this.parts.instrumentation.stop()]).catch(() => {});
      await db.end().catch(() => {});
      throw err;
    }
    await queueState.start();
    // stop() was called while starting: claim nothing; stop() takes it from here.
    if (this.stopPromise) return;
    loop.start();
    heartbeat.start();
    this.parts.registry.start();
    await this.parts.maintenance?.start();
  }

  /**
   * Stops gracefully: claims nothing more, lets running jobs finish for up to
   * `shutdownTimeoutMs`, then aborts the rest. Every job it claimed and did not
   * finish (aborted, or claimed ahead and never started) goes back to pending
   * without spending its attempt, except one whose handler ignores its abort and
   * may still run it. `{ exiting: true }`: the process exits right after, so such
   * handlers end with it, and their jobs go back too. Writes every buffered result
   * before resolving.
   */
  stop(options: { exiting?: boolean; failRunning?: Error } = {}): Promise<void> {
    let exiting: boolean;
    try {
      let failRunning: Error | undefined;
      ({ exiting, failRunning } = resolveStopOptions(options));
      this.failRunning ??= failRunning;
    } catch (err) {
      return Promise.reject(err as Error);
    }
    if (this.state === 'idle') {
      this.state = 'stopped';
      return Promise.resolve();
    }
    // Called while starting: let start() finish (it claims nothing more), then stop.
    this.exiting ||= exiting;
    this.stopPromise ??= (async () => {
      await this.startedOrCut();
      if (this.parts && this.state !== 'stopped') {
        this.state = 'stopping';
        this.listenProbe?.cancel();
        await shutDown(this.parts, {
          config: this.config,
          slots: this.slots,
          emit: this.emitEvent,
          exiting: () => this.exiting,
          failRunning: () => this.failRunning,
          onDrained: (resolve) => (this.drained = resolve),
          spare: () => this.spareStore(),
          reportError: (err) => this.reportError(err),
        });
      }
      this.state = 'stopped';
      clearInterval(this.keepAlive);
    })();
    return this.stopPromise;
  }

  /** A store on one connection of its own, for the stop's last sweep after it cut its pool (see shutdown.ts). */
  private async spareStore(): Promise<{ store: WorkerStore; end(): Promise<void> }> {
    const { config } = this;
    const db = await openDriver(
      config.driver,
      { ...this.options, prepare: false, statementTimeoutMs: SPARE_STATEMENT_MS },
      1,
      'sluice-worker',
    );
    return { store: new PgWorkerStore(db, config.schema, config.workerId, false, config.completedJobs), end: () => db.end() };
  }

  /**
   * A start() in progress, waited for until the stop's deadline; past it, its
   * statements are cut and it ends at once (outside review 66: a start-up query
   * held by a table lock kept stop() waiting for statementTimeoutMs, 33 s).
   */
  private async startedOrCut(): Promise<void> {
    if (!this.starting) return;
    const settled = this.starting.then(
      () => true,
      () => true,
    );
    let timer: NodeJS.Timeout | undefined;
    const inTime = await Promise.race([
      settled,
      new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), stopWindowMs(this.config)))),
    ]);
    clearTimeout(timer);
    if (!inTime) {
      this.db?.abort(pastDeadline());
      await settled;
    }
  }

  /**
   * Says at start what is wrong, once: a schema that was never migrated, a server
   * that refused the login or has no such database, or a role that may not claim
   * jobs rejects start() (nothing would ever run; a typo in the URL looked like an
   * outage, outside review 150; a role without the worker's privileges logged one
   * refused claim and idled for ever, review 156); Postgres out of reach is
   * reported as an 'error' event naming where it tried, and the worker starts
   * anyway and keeps trying (it may simply be up before its database).
   */
  private async probe(db: Driver): Promise<void> {
    let refusal: Error | undefined;
    try {
      refusal = await whyNoJobCanRun(db, this.config.schema, this.options.connectionString, {
        maintenance: this.config.maintenance !== undefined,
        schedules: this.config.schedules.length > 0,
        deleting: this.config.completedJobs === 'delete',
      });
    } catch (err) {
      // Cut by a stop() while starting: the stop's own error says why, not "cannot reach".
      const unreachable = isConnectionFailure(err) && !this.stopPromise;
      this.reportError(unreachable ? connectionError(err, this.options.connectionString) : err, 'start');
      return;
    }
    if (!refusal) return;
    this.state = 'stopped';
    await db.end().catch(() => {});
    throw refusal;
  }

  /** LISTEN for wakes and control messages; resolves once in place (or failed: the notifier retries). */
  private listen(): Promise<void> {
    return listenFor(this.parts!, {
      config: this.config,
      db: this.db!,
      listenConnectionString: this.options.listenConnectionString,
      running: () => this.state === 'running',
      probing: (probe) => (this.listenProbe = probe),
      reportError: (err, part) => this.reportError(err, part),
      reachable: () => this.reachable('listen'),
    });
  }

  private reportError(err: unknown, part?: string): void {
    // Which part failed, where known: "worker: <driver message>" (review 102) and "statement: no answer…" (147) did not say.
    const context = part ? `worker ${part}` : 'worker';
    const wrapped = err instanceof ConnectionError ? connectionErrorIn(err, context) : wrapDatabaseError(err, context);
    if (wrapped instanceof ConnectionError) {
      this.unreachableSince ??= Date.now();
      this.unreachable.add(part === 'listen' ? 'listen' : 'pool');
    }
    if (this.listenerCount('error') > 0) this.emit('error', wrapped);
  }

  /** LISTEN is in place again, or a cycle went through on the pool: once both work after connection errors, Postgres is back. */
  private reachable(part: 'pool' | 'listen'): void {
    this.unreachable.delete(part);
    if (this.unreachableSince === undefined || this.unreachable.size > 0) return;
    const downMs = Date.now() - this.unreachableSince;
    this.unreachableSince = undefined;
    this.emit('reconnected', { downMs });
  }
}
