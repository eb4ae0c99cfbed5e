/**
 * Loop: the lifecycle every background loop shares. Passes never overlap; stop()
 * waits for the pass in flight and nothing runs after it; a failed pass backs
 * off, a good one starts the backoff over; the interval is jittered within its
 * bounds; trigger() and runSoon() bring a pass forward.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Loop, type LoopOptions } from '../../src/lifecycle/loop.js';

/** A pass that can be held open: `open()` lets the oldest held pass finish. */
class Passes {
  readonly starts: number[] = [];
  running = 0;
  most = 0;
  hold = false;
  fail: unknown[] = [];
  private readonly waiting: (() => void)[] = [];

  readonly pass = async (): Promise<void> => {
    this.starts.push(Date.now());
    this.running++;
    this.most = Math.max(this.most, this.running);
    try {
      if (this.hold) await new Promise<void>((resolve) => this.waiting.push(resolve));
      const err = this.fail.shift();
      if (err) throw err;
    } finally {
      this.running--;
    }
  };

  open(): void {
    this.waiting.shift()?.();
  }

  get count(): number {
    return this.starts.length;
  }
}

let passes: Passes;
let errors: unknown[];
let loops: Loop<unknown>[];
let t0: number;

function loop<R = void>(options: Partial<LoopOptions<R>> = {}): Loop<R> {
  const l = new Loop<R>({
    pass: passes.pass as unknown as () => Promise<R>,
    intervalMs: 1_000,
    onError: (err) => errors.push(err),
    ...options,
  });
  loops.push(l as Loop<unknown>);
  return l;
}

/** Times of the passes so far, relative to the test's start. */
function times(): number[] {
  return passes.starts.map((t) => t - t0);
}

beforeEach(() => {
  vi.useFakeTimers();
  passes = new Passes();
  errors = [];
  loops = [];
  t0 = Date.now();
});
afterEach(async () => {
  passes.hold = false;
  for (let i = 0; i < 10; i++) passes.open();
  await Promise.all(loops.map((l) => l.stop()));
  vi.useRealTimers();
});

describe('Loop', () => {
  it('start() runs the first pass one interval later, then one every interval after each pass ends', async () => {
    loop().start();
    await vi.advanceTimersByTimeAsync(999);
    expect(passes.count).toBe(0);
    await vi.advanceTimersByTimeAsync(2_001);
    expect(times()).toEqual([1_000, 2_000, 3_000]);
  });

  it('measures the interval from the end of a pass: a slow pass is not followed at once', async () => {
    passes.hold = true;
    loop().start();
    await vi.advanceTimersByTimeAsync(1_000);
    await vi.advanceTimersByTimeAsync(2_500); // the pass is still running at 3,500
    passes.hold = false;
    passes.open();
    await vi.advanceTimersByTimeAsync(999);
    expect(passes.count).toBe(1);
    await vi.advanceTimersByTimeAsync(1);
    expect(times()).toEqual([1_000, 4_500]);
  });

  it('never overlaps passes: triggers during a pass are folded into one pass right after it', async () => {
    passes.hold = true;
    const l = loop();
    const first = l.trigger();
    const second = l.trigger();
    const third = l.trigger();
    expect(passes.count).toBe(1);
    let secondDone = false;
    void second.then(() => (secondDone = true));
    passes.open();
    await vi.advanceTimersByTimeAsync(0);
    expect(passes.count).toBe(2);
    expect(secondDone).toBe(false); // waits for the pass that started after it was asked for
    passes.open();
    await Promise.all([first, second, third]);
    expect(passes.count).toBe(2);
    expect(passes.most).toBe(1);
  });

  it('folds a trigger made synchronously by the pass itself, instead of starting a second pass inside it', async () => {
    let l: Loop | undefined;
    let calls = 0;
    let inside = 0;
    let most = 0;
    l = loop({
      pass: async () => {
        inside++;
        most = Math.max(most, inside);
        if (++calls === 1) void l!.trigger();
        await Promise.resolve();
        inside--;
      },
      intervalMs: Infinity,
    });
    await l.trigger();
    await vi.advanceTimersByTimeAsync(0);
    expect([calls, most]).toEqual([2, 1]);
  });

  it('stop() resolves only after the pass in flight, and nothing runs after it', async () => {
    passes.hold = true;
    const l = loop();
    l.start();
    await vi.advanceTimersByTimeAsync(1_000);
    const pending = l.trigger(); // a follow-up that must not run now
    l.runSoon(0);
    let stopped = false;
    const stop = l.stop().then(() => (stopped = true));
    await vi.advanceTimersByTimeAsync(100);
    expect(stopped).toBe(false);
    expect(passes.running).toBe(1);
    passes.open();
    await stop;
    await pending; // resolved, not left hanging
    expect(passes.running).toBe(0);
    await l.trigger();
    l.runSoon(0);
    l.start();
    await vi.advanceTimersByTimeAsync(60_000);
    expect(passes.count).toBe(1);
  });

  it("fires the pass's signal on stop(), and does not report the error of a pass that gave up", async () => {
    let seen: AbortSignal | undefined;
    const l = loop({
      pass: (signal) =>
        new Promise<void>((_, reject) => {
          seen = signal;
          signal.addEventListener('abort', () => reject(new Error('aborted')));
        }),
    });
    void l.trigger();
    expect(seen?.aborted).toBe(false);
    await l.stop();
    expect(seen?.aborted).toBe(true);
    expect(errors).toEqual([]);
  });

  it('reports a failed pass and, without a backoff, runs again at the usual interval', async () => {
    passes.fail = [new Error('boom')];
    loop().start();
    await vi.advanceTimersByTimeAsync(2_000);
    expect(errors).toHaveLength(1);
    expect(times()).toEqual([1_000, 2_000]);
  });

  it('backs off after consecutive failures, and starts over after a pass that succeeds', async () => {
    const boom = new Error('boom');
    passes.fail = [boom, boom, boom, undefined, boom];
    // random 1: the backoff's delays are its nominal ones (50, 100, 200, ...).
    loop({ intervalMs: 10_000, backoff: { minMs: 50, maxMs: 150 }, random: () => 1 }).start();
    await vi.advanceTimersByTimeAsync(10_000 + 50 + 100 + 150 + 10_000 + 50);
    expect(times()).toEqual([10_000, 10_050, 10_150, 10_300, 20_300, 20_350]);
    expect(errors).toHaveLength(4);
  });

  it('retry() brings the next pass forward by the backoff delay, as after a failure', async () => {
    const l = loop({ intervalMs: Infinity, backoff: { minMs: 100, maxMs: 1_000 }, random: () => 1 });
    await l.trigger();
    l.retry();
    await vi.advanceTimersByTimeAsync(100);
    expect(times()).toEqual([0, 100]);
    // That pass succeeded: the backoff started over.
    l.retry();
    await vi.advanceTimersByTimeAsync(100);
    expect(times()).toEqual([0, 100, 200]);
  });

  it('keeps every jittered interval within its bounds, and uses the random draw', async () => {
    const draws = [0, 1, 0.5, 0.25];
    loop({ intervalMs: 1_000, jitter: [0.75, 1.25], random: () => draws.shift() ?? 0.5 }).start();
    await vi.advanceTimersByTimeAsync(750 + 1_250 + 1_000 + 875);
    expect(times()).toEqual([750, 2_000, 3_000, 3_875]);
  });

  it('spreads intervals over the whole jitter range with Math.random', async () => {
    const l = loop({ intervalMs: 1_000, jitter: [0.75, 1] });
    l.start();
    await vi.advanceTimersByTimeAsync(200_000);
    const gaps = times().map((t, i, all) => t - (all[i - 1] ?? 0));
    expect(Math.min(...gaps)).toBeGreaterThanOrEqual(750);
    expect(Math.max(...gaps)).toBeLessThanOrEqual(1_000);
    expect(Math.max(...gaps) - Math.min(...gaps)).toBeGreaterThan(150);
  });

  it('computes the next interval from the pass result (undefined before the first pass)', async () => {
    const asked: unknown[] = [];
    const results = [300, 50];
    loop<number>({
      pass: async () => {
        passes.starts.push(Date.now());
        return results.shift() ?? 10_000;
      },
      intervalMs: (r) => {
        asked.push(r);
        return r ?? 100;
      },
    }).start();
    await vi.advanceTimersByTimeAsync(100 + 300 + 50);
    expect(times()).toEqual([100, 400, 450]);
    expect(asked).toEqual([undefined, 300, 50, 10_000]);
  });

  it('runSoon(ms) brings the next pass forward, never back', async () => {
    const l = loop();
    l.start();
    l.runSoon(200);
    l.runSoon(5_000); // later than the pass already due: changes nothing
    await vi.advanceTimersByTimeAsync(200);
    expect(times()).toEqual([200]);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(times()).toEqual([200, 1_200]);
  });

  it('runSoon() during a pass applies after it: sooner than the interval, but never overlapping', async () => {
    passes.hold = true;
    const l = loop();
    l.start();
    await vi.advanceTimersByTimeAsync(1_000);
    l.runSoon(100);
    await vi.advanceTimersByTimeAsync(500); // the pass still runs at 1,500
    passes.hold = false;
    passes.open();
    await vi.advanceTimersByTimeAsync(0);
    expect(times()).toEqual([1_000, 1_500]);
    expect(passes.most).toBe(1);
  });

  it('trigger() and runSoon() work before start(), which alone arms the interval', async () => {
    const l = loop();
    await l.trigger();
    l.runSoon(300);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(times()).toEqual([0, 300]);
    l.start();
    await vi.advanceTimersByTimeAsync(1_000);
    expect(times()).toEqual([0, 300, 11_000]);
  });

  it('with an infinite interval runs only when asked', async () => {
    const l = loop({ intervalMs: Infinity });
    l.start();
    await vi.advanceTimersByTimeAsync(1e9);
    expect(passes.count).toBe(0);
    await l.trigger();
    await vi.advanceTimersByTimeAsync(1e9);
    expect(passes.count).toBe(1);
  });

  it('caps a longer interval to what setTimeout can wait, instead of firing at once', async () => {
    loop({ intervalMs: 40 * 86_400_000 }).start();
    await vi.advanceTimersByTimeAsync(86_400_000);
    expect(passes.count).toBe(0);
  });

  it("leaves its timers unref'd: a loop never keeps the process alive", () => {
    const unref = vi.fn();
    const spy = vi.spyOn(globalThis, 'setTimeout').mockImplementation((() => ({ unref })) as never);
    try {
      const l = new Loop({ pass: () => {}, intervalMs: 1_000 });
      l.start();
      l.runSoon(10);
    } finally {
      spy.mockRestore();
    }
    expect(unref).toHaveBeenCalledTimes(2);
  });
});
