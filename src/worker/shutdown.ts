import { setTimeout as sleep } from 'node:timers/promises';
import { ConnectionError, isConnectionFailure, WorkerStoppingError } from '../errors.js';
import type { WorkerStore } from '../db/worker-store.js';
import type { JobRow } from '../job.js';
import { CutOff } from '../lifecycle/cut-off.js';
import type { Emit } from './events.js';
import type { ResolvedWorkerConfig } from './options.js';
import type { Parts } from './parts.js';
import { ABORTED_HANDLER_GRACE_MS } from './run.js';
import type { Slots } from './slots.js';

/** On stop, how long past the deadline and the handlers' grace the last writes get. */
const LAST_WRITES_MS = 2_000;

/** What a stop needs of the Worker it stops. */
export interface Stopping {
  readonly config: ResolvedWorkerConfig;
  readonly slots: Slots;
  readonly emit: Emit;
  /** Read when the stop decides: a later stop({ exiting: true }) may still set it. */
  exiting(): boolean;
  /** stop({ failRunning }): the jobs still running at the deadline fail this attempt with it, instead of going back unspent. */
  failRunning(): Error | undefined;
  /**
   * A store on a connection of its own, outside the pool the stop gave up on, with
   * a short statement limit; `end()` closes it.
   */
  spare(): Promise<{ store: WorkerStore; end(): Promise<void> }>;
  /** Calls `resolve` when the last running handler ends (the worker's drained hook). */
  onDrained(resolve: () => void): void;
  reportError(err: unknown): void;
}

/**
 * A worker's stop, in order: claim nothing more, hand back what never started,
 * give running handlers until shutdownTimeoutMs, abort the rest, write the
 * results, hand back the aborted jobs, close. Every step waits on Postgres
 * within statementTimeoutMs; on a network gone silent that added up to minutes
 * (outside review 61), so past the deadline, the handlers' grace and a moment
 * for the last writes, the driver gives up at once and what is left unwritten
 * stays for the rescuer, as the errors then reported say.
 */
export async function shutDown(parts: Parts, worker: Stopping): Promise<void> {
  const stopAt = Date.now();
  const deadline = stopAt + stopWindowMs(worker.config);
  const cutOff = new CutOff(() => parts.db.abort(pastDeadline()));
  cutOff.notBefore(deadline + ABORTED_HANDLER_GRACE_MS + LAST_WRITES_MS);
  try {
    await stopParts(parts, worker, stopAt, deadline, cutOff);
  } finally {
    cutOff.clear();
  }
}

async function stopParts(parts: Parts, worker: Stopping, stopAt: number, deadline: number, cutOff: CutOff): Promise<void> {
  const { config, slots } = worker;
  // A claim in flight returns jobs too: wait for it before collecting what never started.
  await Promise.race([parts.loop.stopClaiming(), sleepUntil(deadline)]);
  await parts.queueState.stop();
  // Jobs claimed ahead go back now, not after the running ones end: other
  // workers can run them while this one waits for its handlers.
  const notStarted = [...slots.takeWaiting(), ...parts.dispatcher.takeUnsureHandBacks()];
  const handedBack = handBack(parts, worker, notStarted, deadline, cutOff);
  // Beside the running jobs' time, not before it: on a silent network these wait
  // for their statements, and the handlers' time counts from the stop.
  const listenersStopped = Promise.all([parts.maintenance?.stop(), parts.notifier?.stop()]);

  if (slots.runningCount > 0) {
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, Math.max(0, stopAt + config.shutdownTimeoutMs - Date.now()));
      worker.onDrained(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }
  // The handlers' time is up: their signal fires now, not after the steps below,
  // which on a silent network wait for the cut-off (review 64: 3 s late).
  const failWith = worker.failRunning();
  const aborting = failWith
    ? parts.dispatcher.abortAll(failWith, ABORTED_HANDLER_GRACE_MS, 'fatal')
    : parts.dispatcher.abortAll(
        new WorkerStoppingError(`worker is shutting down: shutdownTimeoutMs (${config.shutdownTimeoutMs}) ran out`),
        ABORTED_HANDLER_GRACE_MS,
      );
  await listenersStopped;
  // Steps above that were slow (not a silent network, which the first cut-off
  // ends) must not cut the handlers' grace and the last writes short.
  cutOff.notBefore(Date.now() + ABORTED_HANDLER_GRACE_MS + LAST_WRITES_MS);
  await parts.progress.stop();
  const { stopped, stillRunning } = await aborting;
  // Locks are renewed through the handlers' grace: stopped at the abort, a 1 s
  // visibility timeout ran out within it, and the rescuer gave a job whose
  // handler still ran to another worker (outside review 199).
  await parts.heartbeat.stop();
  // A handler that ignores its signal may still be working on its job: handed
  // back, the job could run in another worker at the same time. It stays
  // 'processing' for the rescuer, which returns it after the visibility timeout.
  // Left processing too after a fatal stop (failRunning), though the process exits: see Dispatcher.
  const leftRunning = stillRunning.length > 0 && (!worker.exiting() || failWith !== undefined);
  if (leftRunning) {
    worker.reportError(
      new WorkerStoppingError(
        `job(s) ${stillRunning.map((job) => job.id).join(', ')}: the handler did not stop within ` +
          `${ABORTED_HANDLER_GRACE_MS} ms of its abort; left processing so that no other worker runs it ` +
          'while it may still run: the rescuer returns it after the visibility timeout',
      ),
    );
  }
  await parts.loop.drain(deadline);
  await parts.completer.settled();
  const unwritten = parts.completer.ids();
  if (unwritten.length > 0) {
    worker.reportError(
      new WorkerStoppingError(
        `the result(s) or hand-back(s) of job(s) ${unwritten.join(', ')} could not be written on stop (another ` +
          'session holds their rows locked, Postgres is unreachable, or the statement failed: see the errors ' +
          'before this one); they run again if they have attempts left: ' +
          ROW_HELD_LEFT,
      ),
    );
  }
  // A claim still in flight at the deadline (waiting on a lock, say) ended in drain():
  // what it took after the first hand-back waits in the slots, never to start, and
  // goes back with the rest (outside review 66: left processing, locked to a stopped
  // worker, failed by the rescuer without running).
  const claimedLate = slots.takeWaiting();
  // Jobs left processing for the rescuer, whose handlers may still run: the registry keeps their visibility timeout.
  // Failed instead (failRunning): their failures are results, written by drain() above.
  const handBackRunning = failWith ? [] : worker.exiting() ? [...stopped, ...stillRunning] : stopped;
  const back = [...handBackRunning, ...claimedLate];
  const [now, before] = await Promise.all([
    cutOff.fired ? undefined : handBack(parts, worker, back, deadline, cutOff),
    handedBack,
  ]);
  if (cutOff.fired) {
    // The pool is cut (maybe during the hand-backs above, on connections gone
    // dead: outside review 170): every statement on it fails. A claim that
    // committed just before the cut (it waited that long on a lock) left jobs
    // locked to this worker, whether its reply got here or not (review 67: failed
    // by the rescuer, never run). One sweep on a connection of its own gives back
    // every row still locked to this worker but those that must stay processing.
    const keep = [...(leftRunning ? stillRunning.map((job) => job.id) : []), ...unwritten, ...parts.completer.leftToRescuer()];
    const cutBefore = new Set(before.cut.map((job) => job.id));
    await releaseAfterCut(
      worker,
      keep,
      notStarted.filter((job) => !cutBefore.has(job.id)),
      [...(now ? now.cut : back), ...before.cut],
    );
    // The registry last, so the workers view shows this worker until its jobs are handed back.
    await parts.registry.stop([], leftRunning);
  } else {
    await parts.registry.stop([...(now?.rowHeld ?? []), ...before.rowHeld, ...unwritten], leftRunning);
  }
  await parts.instrumentation.stop();
  await parts.db.end();
}

/**
 * After the cut-off: every row still locked to this worker, but `keep`, back to
 * pending with its attempt given back, on a spare connection. The jobs it returns
 * of `handedBackBefore` (whose hand-back may have failed) and of `back` (to go back
 * now) are announced as handed back; a job of `back` it could not return (another
 * session keeps its row locked) is named in an error, as handBack does.
 */
async function releaseAfterCut(
  worker: Stopping,
  keep: readonly string[],
  handedBackBefore: readonly JobRow[],
  back: readonly JobRow[],
): Promise<void> {
  let released: Set<string>;
  try {
    const spare = await worker.spare();
    try {
      released = new Set(await spare.store.releaseOrphans(keep));
    } finally {
      await spare.end().catch(() => {});
    }
  } catch (err) {
    // Those of handedBackBefore whose hand-back failed were named then.
    if (back.length > 0) notHandedBack(worker, back, err);
    return;
  }
  const returned = [...handedBackBefore, ...back].filter((job) => released.has(job.id));
  if (returned.length > 0) worker.emit('jobs:handed-back', returned, { reason: 'stopping' });
  const left = back.filter((job) => !released.has(job.id));
  if (left.length > 0) notHandedBack(worker, left, new Error('another session holds their rows locked'));
}

/** What a hand-back at stop left: rows another session held, and jobs whose hand-back the cut-off ended. */
interface HandBack {
  rowHeld: string[];
  cut: JobRow[];
}

const NOTHING_LEFT: HandBack = { rowHeld: [], cut: [] };

/**
 * Jobs this worker will not run back to pending (see WorkerStore.release), with
 * their attempt given back, announced ('jobs:handed-back', reason 'stopping').
 * Rows another session keeps locked past the deadline stay 'processing', and an
 * error event says so: their ids come back (rowHeld), for the registry row to
 * list (the rescuer then returns them without counting their attempt). Jobs whose
 * hand-back the cut-off ended come back too (cut), unreported: the sweep after
 * the cut returns them, or names them.
 */
async function handBack(
  parts: Parts,
  worker: Stopping,
  jobs: readonly JobRow[],
  deadline: number,
  cutOff: CutOff,
): Promise<HandBack> {
  if (jobs.length === 0) return NOTHING_LEFT;
  try {
    const { released, left } = await untilCutOff(() => parts.completer.release(jobs, deadline), cutOff);
    if (released.length > 0) worker.emit('jobs:handed-back', released, { reason: 'stopping' });
    if (left.length > 0) {
      const ids = left.map((job) => job.id);
      worker.reportError(
        new WorkerStoppingError(
          `could not hand back job(s) ${ids.join(', ')} on stop: another session holds their rows locked; ` + ROW_HELD_LEFT,
        ),
      );
      return { rowHeld: ids, cut: [] };
    }
  } catch (err) {
    if (cutOff.fired) return { rowHeld: [], cut: [...jobs] };
    notHandedBack(worker, jobs, err);
  }
  return NOTHING_LEFT;
}

/** A write at stop that found Postgres unreachable is tried again after this long. */
const UNREACHABLE_RETRY_MS = 250;

/**
 * `write`, tried again while Postgres cannot be reached, until the stop gives up
 * on it (the cut-off). A stop during a restart or failover of a second or two left
 * jobs whose handlers had stopped cleanly to the rescuer, which counted their
 * attempt: single-attempt jobs became dead letters (outside review 168).
 */
async function untilCutOff<T>(write: () => Promise<T>, cutOff: CutOff): Promise<T> {
  for (;;) {
    try {
      return await write();
    } catch (err) {
      if (cutOff.fired || !isConnectionFailure(err)) throw err;
      await sleep(UNREACHABLE_RETRY_MS);
    }
  }
}

/** What becomes of the jobs a stop leaves because another session holds their rows. */
const ROW_HELD_LEFT =
  "left processing. Where the stop could list them in this worker's registry row (Postgres reachable), the " +
  'rescuer returns them after the visibility timeout, once their rows are free, without counting their attempt; otherwise (Postgres ' +
  'unreachable, or the registry not writable) after the visibility timeout, counting it (a job on its last attempt fails)';

/**
 * The rescuer of another worker returns them after the visibility timeout. Named,
 * as every job a stop leaves processing is (review 64: only the connection error was).
 */
function notHandedBack(worker: Stopping, jobs: readonly JobRow[], err: unknown): void {
  const ids = jobs.map((job) => job.id).join(', ');
  worker.reportError(
    new WorkerStoppingError(
      `could not hand back job(s) ${ids} on stop (${err instanceof Error ? err.message : String(err)}); left processing: ` +
        'the rescuer returns them after the visibility timeout, counting the attempt (a job on its last attempt fails)',
      { cause: err },
    ),
  );
}

/** How long after stop() its deadline falls: shutdownTimeoutMs, and at least 2 s for the writes it makes. */
export function stopWindowMs(config: ResolvedWorkerConfig): number {
  return Math.max(2_000, config.shutdownTimeoutMs);
}

/** Why a stop gives up on Postgres: the error its statements still waiting then fail with. */
export function pastDeadline(): ConnectionError {
  return new ConnectionError('worker stopping: Postgres did not answer before the deadline of stop()');
}

function sleepUntil(deadline: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, deadline - Date.now())).unref());
}
