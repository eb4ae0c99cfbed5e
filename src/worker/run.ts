import { inspect, types } from 'node:util';
import type { ResolvedTask } from './task-options.js';
import { JobTimeoutError, PermanentFailure, Snooze, ValidationError } from '../errors.js';
import type { JobContext, JobRow } from '../job.js';

/** How one run of a job ended, as far as the worker is concerned. */
export type Outcome =
  /** `value` is what the handler resolved to (stored as the job's result). */
  | { kind: 'completed'; value: unknown }
  | { kind: 'failed'; error: unknown; permanent: boolean }
  /** The worker gave the job back (shutdown): the attempt does not count. */
  | { kind: 'released' }
  /** Aborted while another session held its row (see Dispatcher.unrenewed): back to pending now, the attempt not spent. */
  | { kind: 'handedBack' }
  /**
   * Aborted because its lock could not be renewed while Postgres was unreachable:
   * a failure (`error`), unless Postgres restarted meanwhile, or `unanswered`: the
   * worker kept asking and Postgres did not answer (Completer).
   */
  | { kind: 'unrenewed'; error: unknown; unanswered: boolean }
  /** The job was taken away (lock expired): this run's result must not be recorded. */
  | { kind: 'lost' }
  /** The job was cancelled while it ran: already 'cancelled' in the database, nothing to write. */
  | { kind: 'cancelled' }
  /** The handler threw Snooze: run again later, the attempt does not count. */
  | { kind: 'snoozed'; snooze: Snooze };

/**
 * Why the worker aborted a run: its timeout passed, the worker is stopping, the
 * lock was taken away, the job was cancelled, or the lock could not be renewed in
 * time ('unrenewed': the attempt fails and is retried, like a timeout, unless
 * Postgres restarted meanwhile; 'unanswered': the same, but the worker kept
 * asking and Postgres did not answer, and the attempt is given back if the job is
 * still the worker's once it does; 'row-held': another session held the row all
 * that time, and the job is handed back); 'fatal': the worker stops after an error
 * nothing caught in its process, and the attempt fails with it, as a timeout's does.
 */
export type AbortCause = 'timeout' | 'shutdown' | 'fatal' | 'lock-lost' | 'cancelled' | 'unrenewed' | 'unanswered' | 'row-held';

/** Outcomes of a run that was aborted by the worker rather than ended by the handler. */
const ABORTED: Partial<Record<AbortCause, Outcome>> = {
  shutdown: { kind: 'released' },
  'row-held': { kind: 'handedBack' },
  'lock-lost': { kind: 'lost' },
  cancelled: { kind: 'cancelled' },
};

const MAX_ERROR_LENGTH = 8_000;

/**
 * How long an aborted handler has to stop before the worker stops waiting for it:
 * after stop()'s grace period, before its job is left to the rescuer instead of
 * handed back (Worker.shutdown()); after a timeout, before its failure is written
 * and its slot refilled (Dispatcher).
 */
export const ABORTED_HANDLER_GRACE_MS = 1_000;

/**
 * One handler run of a claimed job. The handler gets an AbortSignal; when the job
 * times out, the worker stops, the lock is lost or the job is cancelled, the signal
 * fires and the run ends at once, whether or not the handler honours the signal (a
 * handler that ignores it keeps running in the background, but its result is
 * dropped). The Outcome says why it ended; the Completer decides what to write.
 *
 * The AbortController is made only when the handler reads `ctx.signal`: making one
 * and listening to it cost about a tenth of the worker's CPU per no-op job (profiled
 * in a drain), and most short handlers never look at it. The run itself ends on
 * abort through `interrupt`, not through the signal.
 */
export class Run {
  private controller: AbortController | undefined;
  private cause: AbortCause | undefined;
  /** Its lock was found taken away (whatever aborted it first): told once, its result dropped. */
  private lost = false;
  private reason: Error | undefined;
  /** Rejects the run's wait for its handler: set while the handler runs. */
  private interrupt: ((reason: Error) => void) | undefined;
  /** The handler's promise, kept to tell, after an abort, whether the handler really stopped. */
  private returned: PromiseLike<unknown> | undefined;
  /** performance.now() when the run began, for event durations. */
  readonly startedAt = performance.now();
  /** The same moment in whole ms since epoch, for the row's started_at (and ctx.job's: they agree to the ms). */
  readonly startedAtMs = Math.floor(performance.timeOrigin + this.startedAt);
  /**
   * The claim did not start the job (claimed ahead, started_at NULL): its start is
   * this run's, written by the next cycle. Read before the dispatcher sets
   * job.started_at for the handler.
   */
  readonly claimedAhead: boolean;

  constructor(
    readonly job: JobRow,
    readonly task: ResolvedTask,
    /** Receives the handler's ctx.progress() reports (one function for every run: the run comes with each). */
    private readonly onProgress: (value: unknown, run: Run) => void = () => {},
  ) {
    this.claimedAhead = !job.started_at;
  }

  /** Why the worker aborted the run; undefined while it was not. */
  get abortCause(): AbortCause | undefined {
    return this.cause;
  }

  get attempt(): number {
    return this.job.attempts;
  }

  /** True once the lock was found taken away (see loseLock). */
  get lockLost(): boolean {
    return this.lost;
  }

  /**
   * The lock was found taken away: the run is aborted (unless something else
   * aborted it first: a timeout, a lock it could not renew) and its result must not
   * be written. True the first time only, so the loss is told once however often
   * the heartbeat or a claim finds it again (outside review 93: a run aborted as
   * unrenewed was told lost at every beat until its handler returned).
   */
  loseLock(reason: Error): boolean {
    if (this.lost) return false;
    this.lost = true;
    this.abort('lock-lost', reason);
    return true;
  }

  abort(cause: AbortCause, reason: Error): void {
    if (this.cause) return;
    this.cause = cause;
    this.reason = reason;
    this.controller?.abort(reason);
    this.interrupt?.(reason);
  }

  /** The handler's signal, made on first use (already aborted if the run was). */
  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.reason) this.controller.abort(this.reason);
    }
    return this.controller.signal;
  }

  async run(): Promise<Outcome> {
    let timer: NodeJS.Timeout | undefined;
    if (this.task.timeoutMs !== undefined) {
      const ms = this.task.timeoutMs;
      timer = setTimeout(
        () => this.abort('timeout', new JobTimeoutError(`task ${JSON.stringify(this.job.task)} timed out after ${ms} ms`)),
        ms,
      );
    }
    try {
      if (this.reason) throw this.reason;
      // Called here rather than in a later microtask: a handler that returns no
      // promise (a no-op, or synchronous work) then costs no promise at all, which
      // in a drain of short jobs was a good part of the garbage made per job. A
      // synchronous throw lands in the catch below, as a rejection does.
      let value = this.task.handler(this.job.payload, this.context());
      if (isThenable(value)) {
        this.returned = value;
        value = await this.settled(value);
      }
      return this.aborted() ?? { kind: 'completed', value };
    } catch (error) {
      return this.aborted() ?? outcomeOf(error);
    } finally {
      this.interrupt = undefined;
      clearTimeout(timer);
    }
  }

  /** The outcome of a run the worker aborted (undefined: not aborted, or aborted as a failure, such as a timeout). */
  private aborted(): Outcome | undefined {
    if (this.cause === 'unrenewed' || this.cause === 'unanswered') {
      return { kind: 'unrenewed', error: this.reason, unanswered: this.cause === 'unanswered' };
    }
    return this.cause && ABORTED[this.cause];
  }

  /**
   * The handler's promise settled, or the run aborted, whichever comes first. A
   * handler that settles after an abort settles a promise already rejected: neither
   * its value nor its rejection goes anywhere.
   */
  private settled(returned: PromiseLike<unknown>): Promise<unknown> {
    return new Promise((resolve, reject) => {
      if (this.reason) return reject(this.reason);
      this.interrupt = reject;
      returned.then(resolve, reject);
    });
  }

  /**
   * Resolves true once the handler's own promise has settled (at once when it
   * returned none or has settled already), false if it still runs after `ms`. An
   * aborted run ends at once for the worker, but only a handler that honoured its
   * signal has stopped; one that ignores it may still be working on the job.
   * `keepAlive: false`: the wait does not hold the process open by itself.
   */
  handlerStopped(ms: number, { keepAlive = true } = {}): Promise<boolean> {
    const returned = this.returned;
    if (!returned) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), ms);
      if (!keepAlive) timer.unref();
      const stopped = () => {
        clearTimeout(timer);
        resolve(true);
      };
      returned.then(stopped, stopped);
    });
  }

  /** What the handler gets besides the payload: `signal` made only if it is read. */
  private context(): JobContext {
    // eslint-disable-next-line @typescript-eslint/no-this-alias -- read by the context's signal getter
    const run = this;
    return {
      job: this.job,
      attempt: this.job.attempts,
      get signal() {
        return run.signal;
      },
      progress: (value: unknown) => this.onProgress(value, this),
    };
  }
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    value !== null &&
    (typeof value === 'object' || typeof value === 'function') &&
    typeof (value as { then?: unknown }).then === 'function'
  );
}

/** The text stored in last_error: the stack when there is one, whatever was thrown otherwise. */
export function describeError(error: unknown): string {
  let text: string;
  try {
    text = errorText(error);
  } catch {
    // A thrown value whose every reading throws (a revoked Proxy, hostile getters).
    text = 'a value that cannot be read was thrown';
  }
  return storable(text.length > MAX_ERROR_LENGTH ? `${text.slice(0, MAX_ERROR_LENGTH)}…` : text);
}

function errorText(error: unknown): string {
  // isNativeError: also an Error made in another realm (node:vm), which fails instanceof.
  if (error instanceof Error || types.isNativeError(error)) {
    // Each field read on its own: a getter that throws costs that field, not the others.
    const stack = readField(error, 'stack');
    if (typeof stack === 'string' && stack.length > 0) return stack;
    return `${fieldText(readField(error, 'name'), 'Error')}: ${fieldText(readField(error, 'message'), '', '(its message cannot be read)')}`;
  }
  if (typeof error === 'string') return error;
  try {
    // JSON.stringify gives undefined for a symbol or a function: show them as they are.
    return `non-Error thrown: ${JSON.stringify(error) ?? String(error)}`;
  } catch {
    // Circular or BigInt-holding values: inspect() still shows what they were.
    return `non-Error thrown: ${inspect(error, { depth: 2, breakLength: Infinity })}`;
  }
}

/** Stands for a field whose reading threw. */
const UNREADABLE = Symbol('unreadable');

/** A field of a thrown value, or UNREADABLE when reading it throws. */
function readField(value: object, field: 'stack' | 'name' | 'message'): unknown {
  try {
    return (value as Record<string, unknown>)[field];
  } catch {
    return UNREADABLE;
  }
}

/** A field as text: `missing` when it is absent, `unreadable` when it cannot be read or made text. */
function fieldText(value: unknown, missing: string, unreadable = missing): string {
  if (value === UNREADABLE) return unreadable;
  try {
    return value === undefined || value === null ? missing : String(value);
  } catch {
    return unreadable;
  }
}

/** An Error whose stack is its message alone: where Sluice noticed it says nothing about the job. */
function unreadable(message: string): Error {
  const error = new Error(message);
  error.stack = `Error: ${message}`;
  return error;
}

/**
 * What a handler's throw means. Reading a thrown value can itself throw (a revoked
 * Proxy fails `instanceof`): such a value fails the job like any error, in place
 * of one that can be read, and never escapes the run (its slot would be lost).
 */
function outcomeOf(thrown: unknown): Outcome {
  let error = thrown;
  try {
    // Made again from its fields: they may have been changed since the constructor
    // checked them (a Snooze that fails its check fails the job instead).
    if (error instanceof Snooze) return { kind: 'snoozed', snooze: new Snooze(error.runAt ?? error.delayMs) };
    return { kind: 'failed', error, permanent: error instanceof PermanentFailure };
  } catch (err) {
    error =
      err instanceof ValidationError
        ? err
        : unreadable(`the handler threw a value that cannot be read (${describeError(err).split('\n')[0]})`);
    return { kind: 'failed', error, permanent: false };
  }
}

const LONE_SURROGATES = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/**
 * Error text as Postgres can store it: a NUL (JSON.parse of binary data puts one in
 * its message) would fail the whole cycle statement that writes it, and with it
 * every other result of the batch, again and again. NUL is shown escaped and a
 * lone surrogate (no UTF-8 form) as U+FFFD.
 */
function storable(text: string): string {
  return text.replaceAll('\0', '\\u0000').replace(LONE_SURROGATES, '\ufffd');
}
