/**
 * One handler run: what the handler receives, and which Outcome each way of ending
 * gives (value, throw, PermanentFailure, Snooze, timeout, and the worker's aborts).
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { JobTimeoutError, PermanentFailure, SluiceError, Snooze } from '../../src/errors.js';
import type { JobContext, JobRow, TaskHandler } from '../../src/job.js';
import type { ResolvedTask } from '../../src/worker/task-options.js';
import { describeError, Run } from '../../src/worker/run.js';

function job(overrides: Partial<JobRow> = {}): JobRow {
  const now = new Date();
  return {
    id: '7',
    queue: 'default',
    task: 'work',
    payload: { n: 1 },
    status: 'processing',
    priority: 0,
    run_at: now,
    attempts: 2,
    max_attempts: 5,
    locked_at: now,
    locked_by: 'w1',
    last_error: null,
    created_at: now,
    updated_at: now,
    finished_at: null,
    started_at: now,
    trace_context: null,
    job_key: null,
    group_key: null,
    ...overrides,
  };
}

function task(handler: TaskHandler, timeoutMs?: number): ResolvedTask {
  return { handler, timeoutMs, maxAttempts: undefined, backoff: undefined };
}

/** A handler that never settles and ignores its signal; it reports the signal it got. */
function hanging(seen: { signal?: AbortSignal }): TaskHandler {
  return (_payload, ctx) => {
    seen.signal = ctx.signal;
    return new Promise(() => {});
  };
}

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe('Run', () => {
  it('gives the handler the payload, the job, its attempt and a live signal', async () => {
    let ctx: JobContext | undefined;
    let payload: unknown;
    const row = job();
    await new Run(
      row,
      task((p, c) => {
        payload = p;
        ctx = c;
      }),
    ).run();
    expect(payload).toEqual({ n: 1 });
    expect(ctx!.job).toBe(row);
    expect(ctx!.attempt).toBe(2);
    expect(ctx!.signal.aborted).toBe(false);
  });

  it('completes with what the handler resolved to', async () => {
    const outcome = await new Run(
      job(),
      task(async () => ({ sent: 3 })),
    ).run();
    expect(outcome).toEqual({ kind: 'completed', value: { sent: 3 } });
  });

  it('fails (retryable) with the thrown error, sync or async', async () => {
    const boom = new Error('boom');
    const sync = await new Run(
      job(),
      task(() => {
        throw boom;
      }),
    ).run();
    const rejected = await new Run(
      job(),
      task(async () => Promise.reject(boom)),
    ).run();
    expect(sync).toEqual({ kind: 'failed', error: boom, permanent: false });
    expect(rejected).toEqual({ kind: 'failed', error: boom, permanent: false });
  });

  it('fails for good on PermanentFailure', async () => {
    const outcome = await new Run(
      job(),
      task(() => {
        throw new PermanentFailure('bad input');
      }),
    ).run();
    expect(outcome).toMatchObject({ kind: 'failed', permanent: true });
  });

  it('is snoozed when the handler throws Snooze', async () => {
    const snooze = new Snooze(5_000);
    const outcome = await new Run(
      job(),
      task(() => {
        throw snooze;
      }),
    ).run();
    expect(outcome).toEqual({ kind: 'snoozed', snooze });
  });

  it('times out: the run ends at timeoutMs with a JobTimeoutError, and the signal fires', async () => {
    const seen: { signal?: AbortSignal } = {};
    let outcome: unknown;
    void new Run(job(), task(hanging(seen), 1_000)).run().then((o) => (outcome = o));
    await vi.advanceTimersByTimeAsync(999);
    expect(outcome).toBeUndefined();
    await vi.advanceTimersByTimeAsync(1);
    expect(outcome).toMatchObject({ kind: 'failed', permanent: false });
    const error = (outcome as { error: unknown }).error;
    expect(error).toBeInstanceOf(JobTimeoutError);
    expect((error as JobTimeoutError).message).toContain('"work" timed out after 1000 ms');
    expect(seen.signal!.aborted).toBe(true);
  });

  it('reports the timeout, not the error a handler throws when its signal fires', async () => {
    const ended = new Run(
      job(),
      task(
        (_p, { signal }) =>
          new Promise((_, reject) => {
            signal.addEventListener('abort', () => reject(new Error('AbortError: handler gave up')));
          }),
        50,
      ),
    ).run();
    await vi.advanceTimersByTimeAsync(50);
    const outcome = await ended;
    expect(outcome.kind).toBe('failed');
    expect((outcome as { error: unknown }).error).toBeInstanceOf(JobTimeoutError);
  });

  it('does not abort a handler that finished before its timeout', async () => {
    const seen: { signal?: AbortSignal } = {};
    const outcome = await new Run(
      job(),
      task((_p, { signal }) => {
        seen.signal = signal;
        return 'done';
      }, 100),
    ).run();
    await vi.advanceTimersByTimeAsync(500);
    expect(outcome).toEqual({ kind: 'completed', value: 'done' });
    expect(seen.signal!.aborted).toBe(false);
  });

  it.each([
    ['shutdown', 'released'],
    ['lock-lost', 'lost'],
    ['cancelled', 'cancelled'],
  ] as const)('ends at once on abort(%s) as %s, even when the handler ignores its signal', async (cause, kind) => {
    const seen: { signal?: AbortSignal } = {};
    const run = new Run(job(), task(hanging(seen)));
    const ended = run.run();
    await vi.advanceTimersByTimeAsync(10);
    const reason = new SluiceError('CONFIG', 'why');
    run.abort(cause, reason);
    expect(await ended).toEqual({ kind });
    expect(seen.signal!.reason).toBe(reason);
  });

  it('keeps the first abort cause', async () => {
    const run = new Run(job(), task(hanging({})));
    const ended = run.run();
    await vi.advanceTimersByTimeAsync(0);
    run.abort('cancelled', new Error('cancelled'));
    run.abort('shutdown', new Error('shutdown'));
    expect(await ended).toEqual({ kind: 'cancelled' });
  });

  it('an abort outranks what the handler does afterwards (a late value or Snooze is dropped)', async () => {
    let settle!: (value: unknown) => void;
    const run = new Run(
      job(),
      task(() => new Promise((resolve) => (settle = resolve))),
    );
    const ended = run.run();
    await vi.advanceTimersByTimeAsync(0);
    run.abort('lock-lost', new Error('lost'));
    settle('late');
    expect(await ended).toEqual({ kind: 'lost' });
  });

  it('a handler that rejects after its run ended raises no unhandled rejection', async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => void unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      const run = new Run(
        job(),
        task(() => new Promise((_, reject) => setTimeout(() => reject(new Error('late')), 100))),
      );
      const ended = run.run();
      run.abort('shutdown', new Error('stop'));
      expect(await ended).toEqual({ kind: 'released' });
      await vi.advanceTimersByTimeAsync(200);
      await new Promise((resolve) => process.nextTick(resolve));
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });

  it('forwards ctx.progress() to its listener', async () => {
    const reports: unknown[] = [];
    await new Run(
      job(),
      task((_p, { progress }) => {
        progress({ done: 1 });
        progress({ done: 2 });
      }),
      (value) => reports.push(value),
    ).run();
    expect(reports).toEqual([{ done: 1 }, { done: 2 }]);
  });
});

describe('describeError', () => {
  it('keeps the stack of an Error, whose first line is "Name: message"', () => {
    const text = describeError(new TypeError('bad thing'));
    expect(text.split('\n')[0]).toBe('TypeError: bad thing');
    expect(text.split('\n').length).toBeGreaterThan(1);
  });

  it('falls back to "Name: message" for an Error without a stack', () => {
    const error = new RangeError('out of range');
    error.stack = undefined;
    expect(describeError(error)).toBe('RangeError: out of range');
  });

  it('stores a thrown string as it is, anything else as JSON', () => {
    expect(describeError('plain text')).toBe('plain text');
    expect(describeError({ code: 42 })).toBe('non-Error thrown: {"code":42}');
    expect(describeError(null)).toBe('non-Error thrown: null');
  });

  it('describes what JSON cannot (circular, BigInt) instead of throwing', () => {
    const circular: Record<string, unknown> = { name: 'loop' };
    circular.self = circular;
    expect(describeError(circular)).toContain("name: 'loop'");
    expect(describeError({ n: 10n })).toContain('10n');
  });

  it('caps the text at 8,000 characters, marked as cut', () => {
    const text = describeError('x'.repeat(20_000));
    expect(text).toHaveLength(8_001);
    expect(text.endsWith('…')).toBe(true);
    expect(describeError('y'.repeat(8_000))).toBe('y'.repeat(8_000));
  });
});
