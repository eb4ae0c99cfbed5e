import { isServerDown } from '../errors.js';
import type { Driver } from '../db/driver.js';
import { channelFor } from '../db/identifiers.js';
import { workerStatements } from '../db/statements/worker.js';
import { PgWorkerStore } from '../db/store.js';
import { rescuerTask } from '../maintenance/rescuer.js';
import { createMaintenance, type WorkerMaintenance } from '../maintenance/worker-maintenance.js';
import { Notifier } from '../notify/listener.js';
import { resolveSchemas } from '../task-schemas.js';
import { Completer } from './completer.js';
import { Dispatcher } from './dispatcher.js';
import type { Emit, WorkerEmitter } from './events.js';
import { FetchLoop } from './fetch-loop.js';
import { GroupedQueues } from './grouped-queues.js';
import { Heartbeat, lateClaimMs } from './heartbeat.js';
import { instrumentWorker, type Instrumentation } from './instrumentation.js';
import { composeHandlers, payloadSchemas, tracing } from './middleware.js';
import type { ResolvedWorkerConfig, WorkerOptions } from './options.js';
import { ProgressWriter } from './progress.js';
import { lostClaimAhead, QueueState, turnedGrouped } from './queue-state.js';
import { WorkerRegistry } from './registry.js';
import type { Slots } from './slots.js';

/** The parts a running worker is made of; absent before start(). */
export interface Parts {
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

/** What the parts need of the Worker that owns them. */
export interface Owner {
  readonly config: ResolvedWorkerConfig;
  readonly options: WorkerOptions;
  readonly slots: Slots;
  /** Where the maintenance, the instrumentation and the rescue report. */
  readonly events: WorkerEmitter;
  readonly emit: Emit;
  /** False once the worker is stopping: nothing new starts. */
  accepting(): boolean;
  /** The last running job finished. */
  drained(): void;
  /** `part`: which part of the worker failed (its error message says so). */
  error(err: unknown, part?: string): void;
  /** A cycle went through on the pool. */
  poolWorks(): void;
}

/** Makes the parts of a running worker on its pool; starts none of them. */
export async function assembleParts(db: Driver, owner: Owner): Promise<Parts> {
  const { config, slots } = owner;
  // When this worker started and last found Postgres down (performance.now()): its
  // rescue counts heartbeats as no older than these (see rescuerTask).
  const startedAt = performance.now();
  let lastUnreachable: number | undefined;
  const errorIn =
    (part: string) =>
    (err: unknown): void => {
      if (isServerDown(err)) lastUnreachable = performance.now();
      owner.error(err, part);
    };
  const store = new PgWorkerStore(db, config.schema, config.workerId, config.preparedStatements, config.completedJobs);
  const tasks = await composeHandlers(config.tasks, [
    payloadSchemas(resolveSchemas(owner.options.schemas, 'Worker')),
    ...(config.tracing ? [tracing] : []),
  ]);

  const completer: Completer = new Completer(store, config, {
    emit: owner.emit,
    resultAdded: () => loop.resultAdded(),
    slotFreed: () => loop.slotFreed(),
    dueAt: (at) => loop.wakeAt(at),
    error: errorIn('result write'),
    writeError: (err, what) => owner.error(err, what),
  });
  // Every job this worker holds: the heartbeat keeps their locks fresh, and the
  // sweep after a claim whose reply was lost leaves them alone. Finished jobs whose
  // results are not written yet (Postgres unreachable, say) are still this worker's:
  // heartbeated too, or they would be rescued and run again once the outage
  // outlasts the visibility timeout. So are jobs whose handlers a stop aborted, through their grace.
  const held = (): string[] => [...slots.heldIds(), ...completer.ids(), ...dispatcher.settlingIds()];
  const locks = {
    intervalMs: config.heartbeatIntervalMs,
    renewalTimeoutMs: config.lockRenewalTimeoutMs,
    visibilityTimeoutMs: config.visibilityTimeoutMs,
  };
  const lateClaim = lateClaimMs(locks);
  // Workers that listen hear of pause/limit changes at once; the timer is the
  // fallback for missed notifications, and the only source for those that poll.
  const queueState = new QueueState(
    store,
    config.queues,
    config.queueConcurrency,
    config.listen ? 30_000 : config.pollIntervalMs,
    (before, after) => {
      // Paused or limited since, or found grouped: what was claimed ahead there must not start.
      for (const queue of lostClaimAhead(before, after)) {
        dispatcher.handBackQueue(queue, queueState.flagging(queue) ? 'grouped' : 'queue-changed');
      }
      for (const queue of turnedGrouped(before, after)) dispatcher.handBackQueue(queue, 'grouped');
      loop.wake();
    },
    errorIn('queue settings'),
  );
  const groupedQueues = new GroupedQueues(
    store,
    (queue) => queueState.claimPlan.plain.includes(queue),
    (queue) => {
      dispatcher.handBackQueue(queue, 'grouped');
      void queueState.refresh().then(() => loop.wake());
    },
    errorIn('grouped queues'),
    (queue, grouping) => queueState.assumeGrouped(queue, grouping),
  );
  // Nothing is claimed ahead while a strict limited queue (a limit that counts every
  // claimed job) is served beside plain ones: plain jobs waiting here took every slot
  // that freed, and the limited queue's claims, which start only in free slots, found
  // none (outside review 128: 0-3 starts/s against 130-160 for the plain queue).
  // While the limited queues are quiet (see LimitedClaims.quiet), plain jobs are claimed ahead again.
  const claimAhead = () => {
    const plan = queueState.claimPlan;
    return plan.strict.length === 0 || plan.plain.length === 0 || loop.limitedQuiet;
  };
  const loop: FetchLoop = new FetchLoop(
    store,
    { ...config, tasks: [...config.tasks.keys()] },
    {
      capacity: () => slots.capacity(claimAhead()),
      wanted: () => slots.wanted(claimAhead()),
      wantedIn: (queue) => slots.wantedIn(queue, claimAhead()),
      free: () => slots.free(),
      // Not to be swept back as orphans either: the jobs left to the rescuer.
      heldIds: () => [...held(), ...completer.leftToRescuer()],
      claimed: (jobs, roundTripMs) => {
        const ids = jobs.map((j) => j.id);
        heartbeat.claimed(ids, performance.now() - roundTripMs);
        completer.claimed(ids);
        slots.recordRoundTrip(roundTripMs);
        dispatcher.claimed(jobs, roundTripMs);
        // A slow claim: renew what it took now, not an interval from now (a late one's go back).
        if (roundTripMs > config.heartbeatIntervalMs && roundTripMs <= lateClaim) void heartbeat.beat();
        groupedQueues.claimed(jobs);
      },
    },
    completer,
    () => queueState.claimPlan,
    errorIn('claim and result write'), // one statement does both (the cycle)
    () => owner.poolWorks(),
  );
  const heartbeat = new Heartbeat(store, locks, {
    held,
    renewable: (ids) => completer.renewable(ids),
    lost: (ids) => dispatcher.lockLost(ids),
    cancelled: (ids) => ids.forEach((id) => dispatcher.cancel(id)),
    unrenewed: (ids, rowHeld, unanswered) => dispatcher.unrenewed(ids, config.lockRenewalTimeoutMs, rowHeld, unanswered),
    rowHeldChanged: () => registry.refresh(),
    answered: () => loop.answered(),
    error: errorIn('heartbeat'),
  });
  const progress = new ProgressWriter(store, config.progressIntervalMs, errorIn('progress'));
  const dispatcher = new Dispatcher(
    slots,
    completer,
    progress,
    {
      tasks,
      maxResultBytes: config.maxResultBytes,
      visibilityTimeoutMs: config.visibilityTimeoutMs,
      lateClaimMs: lateClaim,
    },
    {
      emit: owner.emit,
      accepting: owner.accepting,
      stale: (job) => {
        const plan = queueState.claimPlan;
        if (plan.plain.includes(job.queue)) return undefined;
        if (plan.limited.includes(job.queue)) {
          // Claimed ahead where nothing is any more: a claim sent before the queue's limit.
          return plan.noAhead.includes(job.queue) && !job.started_at ? 'queue-changed' : undefined;
        }
        return queueState.flagging(job.queue) ? 'grouped' : 'queue-changed';
      },
      finished: (job) => {
        // A slot of a limited queue opened: claim it (beside the write of this
        // result, which the claim counts as finished; see FetchLoop.cycle).
        if (config.queueConcurrency.has(job.queue) || queueState.claimPlan.limited.includes(job.queue)) loop.wakeFor(job.queue);
        if (slots.runningCount === 0) owner.drained();
      },
      error: errorIn('hand-back'),
    },
  );
  const rescuer = rescuerTask(
    db,
    workerStatements(config.schema),
    config.visibilityTimeoutMs,
    config.rescueIntervalMs,
    (jobs) => {
      for (const job of jobs) owner.events.emit('job:rescue', job);
      owner.events.emit('jobs:rescued', jobs);
      loop.wake();
    },
    () => ({
      sinceUnreachableMs: lastUnreachable === undefined ? undefined : performance.now() - lastUnreachable,
      sinceStartMs: performance.now() - startedAt,
    }),
  );
  const notifier = config.listen ? new Notifier(db, channelFor(config.schema), config.listenCheckIntervalMs) : undefined;
  // An idle worker sends nothing else that an outage could fail.
  notifier?.on('connectionError', (err) => isServerDown(err) && (lastUnreachable = performance.now()));
  const registry = new WorkerRegistry(
    db,
    {
      ...config,
      tasks: [...config.tasks.keys()],
      intervalMs: config.registryIntervalMs,
      rowHeld: () => heartbeat.rowHeld(),
    },
    errorIn('registry'),
  );
  return {
    db,
    queueState,
    completer,
    loop,
    heartbeat,
    progress,
    dispatcher,
    maintenance: createMaintenance(db, config, rescuer, owner.events, errorIn),
    notifier,
    instrumentation: await instrumentWorker(owner.events, config, db),
    registry,
  };
}
