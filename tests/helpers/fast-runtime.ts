/**
 * The worker runtime's roles (Slots, Completer, FetchLoop, QueueState,
 * Dispatcher, Heartbeat, ProgressWriter) wired as src/worker/worker.ts wires
 * them, over a MemoryStore instead of Postgres, for the fast tests (tests/fast/).
 * Only the wiring and stop()'s order live here: every decision is the roles' own.
 * Use with vi.useFakeTimers().
 */
import type { BackoffOptions } from '../../src/worker/backoff.js';
import type { JobRow, TaskHandler } from '../../src/job.js';
import { WorkerStoppingError } from '../../src/errors.js';
import { Completer } from '../../src/worker/completer.js';
import { Dispatcher } from '../../src/worker/dispatcher.js';
import type { WorkerEvents } from '../../src/worker/events.js';
import { FetchLoop } from '../../src/worker/fetch-loop.js';
import { Heartbeat, lateClaimMs } from '../../src/worker/heartbeat.js';
import type { ResolvedTask } from '../../src/worker/task-options.js';
import { ProgressWriter } from '../../src/worker/progress.js';
import { QueueState } from '../../src/worker/queue-state.js';
import { Slots } from '../../src/worker/slots.js';
import type { MemoryDatabase, MemoryStore } from './memory-store.js';

export interface FastWorkerOptions {
  tasks: Record<string, TaskHandler | (Partial<ResolvedTask> & { handler: TaskHandler })>;
  queues?: string[];
  concurrency?: number;
  prefetch?: number;
  batchSize?: number;
  queueConcurrency?: Record<string, number>;
  pollIntervalMs?: number;
  completionFlushMs?: number;
  heartbeatIntervalMs?: number;
  lockRenewalTimeoutMs?: number;
  backoff?: Required<BackoffOptions>;
}

/** One event as emitted: its name and arguments. */
export interface Recorded {
  event: keyof WorkerEvents;
  args: unknown[];
}

export class FastWorker {
  readonly store: MemoryStore;
  readonly slots: Slots;
  readonly completer: Completer;
  readonly loop: FetchLoop;
  readonly queueState: QueueState;
  readonly heartbeat: Heartbeat;
  readonly progress: ProgressWriter;
  readonly dispatcher: Dispatcher;
  readonly events: Recorded[] = [];
  readonly errors: unknown[] = [];
  private state: 'running' | 'stopping' = 'running';
  private drained: (() => void) | undefined;

  constructor(
    db: MemoryDatabase,
    readonly id: string,
    options: FastWorkerOptions,
  ) {
    const store = db.store(id);
    this.store = store;
    const tasks = new Map<string, ResolvedTask>(
      Object.entries(options.tasks).map(([name, t]) => [
        name,
        {
          timeoutMs: undefined,
          maxAttempts: undefined,
          backoff: undefined,
          ...(typeof t === 'function' ? { handler: t } : t),
        },
      ]),
    );
    const limits = new Map(Object.entries(options.queueConcurrency ?? {}));
    const pollIntervalMs = options.pollIntervalMs ?? 2_000;
    const renewalTimeoutMs = options.lockRenewalTimeoutMs ?? 3_000;
    const emit = (event: keyof WorkerEvents, ...args: unknown[]) => void this.events.push({ event, args });
    const onError = (err: unknown) => void this.errors.push(err);
    const slots = new Slots({ concurrency: options.concurrency ?? 4, prefetch: options.prefetch ?? 0, queueLimits: limits });
    const completer: Completer = new Completer(
      store,
      {
        backoff: options.backoff ?? { baseMs: 1_000, maxMs: 3_600_000, shape: 'exponential' },
        maxResultBytes: 1024 * 1024,
        visibilityTimeoutMs: 30_000,
      },
      {
        emit,
        resultAdded: () => loop.resultAdded(),
        slotFreed: () => loop.slotFreed(),
        dueAt: (at) => loop.wakeAt(at),
        error: onError,
        writeError: onError,
      },
    );
    const held = (): string[] => [...slots.heldIds(), ...completer.ids()];
    const queueState = new QueueState(store, options.queues ?? ['default'], limits, pollIntervalMs, () => loop.wake(), onError);
    const loop: FetchLoop = new FetchLoop(
      store,
      {
        tasks: [...tasks.keys()],
        batchSize: options.batchSize ?? 100,
        completionFlushMs: options.completionFlushMs ?? 5,
        pollIntervalMs,
        wakeCooldownMs: 0,
        heartbeatIntervalMs: options.heartbeatIntervalMs ?? 1_000,
      },
      {
        capacity: () => slots.capacity(),
        wanted: () => slots.wanted(),
        wantedIn: (queue) => slots.wantedIn(queue),
        free: () => slots.free(),
        heldIds: () => [...held(), ...completer.leftToRescuer()],
        claimed: (jobs, roundTripMs) => {
          heartbeat.claimed(
            jobs.map((j) => j.id),
            performance.now() - roundTripMs,
          );
          slots.recordRoundTrip(roundTripMs);
          dispatcher.claimed(jobs, roundTripMs);
        },
      },
      completer,
      () => queueState.claimPlan,
      onError,
    );
    const heartbeat = new Heartbeat(
      store,
      { intervalMs: options.heartbeatIntervalMs ?? 1_000, renewalTimeoutMs, visibilityTimeoutMs: 4_000 },
      {
        held,
        renewable: (ids) => completer.renewable(ids),
        lost: (ids) => dispatcher.lockLost(ids),
        cancelled: (ids) => ids.forEach((id) => dispatcher.cancel(id)),
        unrenewed: (ids) => dispatcher.unrenewed(ids, renewalTimeoutMs),
        rowHeldChanged: () => {},
        answered: () => loop.answered(),
        error: onError,
      },
    );
    const progress = new ProgressWriter(store, 1_000, onError);
    const dispatcher = new Dispatcher(
      slots,
      completer,
      progress,
      {
        tasks,
        maxResultBytes: 1024 * 1024,
        visibilityTimeoutMs: 30_000,
        lateClaimMs: lateClaimMs({ intervalMs: options.heartbeatIntervalMs ?? 1_000, renewalTimeoutMs }),
      },
      {
        emit,
        accepting: () => this.state === 'running',
        finished: (job) => {
          if (limits.has(job.queue) || queueState.claimPlan.limited.includes(job.queue)) loop.wake();
          if (slots.runningCount === 0) this.drained?.();
        },
        error: onError,
      },
    );
    this.slots = slots;
    this.completer = completer;
    this.queueState = queueState;
    this.loop = loop;
    this.heartbeat = heartbeat;
    this.progress = progress;
    this.dispatcher = dispatcher;
  }

  async start(): Promise<void> {
    await this.queueState.start();
    this.loop.start();
    this.heartbeat.start();
  }

  /** worker.ts's shutdown, without the connections: stop claiming, let runs finish, abort, write, release. */
  async stop(shutdownTimeoutMs = 1_000): Promise<void> {
    this.state = 'stopping';
    const deadline = Date.now() + Math.max(2_000, shutdownTimeoutMs);
    await this.loop.stopClaiming();
    this.queueState.stop();
    const notStarted = [...this.slots.takeWaiting(), ...this.dispatcher.takeUnsureHandBacks()];
    if (this.slots.runningCount > 0) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, shutdownTimeoutMs);
        this.drained = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
    this.heartbeat.stop();
    await this.progress.stop();
    const { stopped: unfinished } = await this.dispatcher.abortAll(new WorkerStoppingError('worker is shutting down'), 0);
    await this.loop.drain(deadline);
    await this.completer.settled();
    const toRelease = [...unfinished, ...notStarted];
    if (toRelease.length > 0) await this.completer.release(toRelease, deadline);
  }

  /** Stops every timer without stop()'s writes (end of a test). */
  async halt(): Promise<void> {
    this.state = 'stopping';
    this.heartbeat.stop();
    this.queueState.stop();
    await this.loop.stopClaiming();
  }

  /** Ids of the jobs of every `event` recorded, in order (jobs:* events contribute each of their jobs). */
  ids(event: keyof WorkerEvents): string[] {
    return this.events
      .filter((e) => e.event === event)
      .flatMap((e) => (Array.isArray(e.args[0]) ? (e.args[0] as JobRow[]) : [e.args[0] as JobRow]).map((j) => j.id));
  }
}

/** A promise that resolves after `ms` of (fake) time. */
export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
