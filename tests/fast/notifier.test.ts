/**
 * Notifier on a fake clock and a fake driver: connection attempts that fail are
 * retried with a growing backoff, a lost connection is replaced (the backoff
 * starting over after a success), the open connection is checked every
 * checkIntervalMs, and nothing is opened or checked after stop().
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { Driver, ListenHandlers, Listening } from '../../src/db/driver.js';
import { Notifier } from '../../src/notify/listener.js';

class FakeDriver {
  attempts: number[] = [];
  /** Attempts fail while this is positive. */
  refuse = 0;
  /** Attempts wait for this while set. */
  hold: Promise<void> | undefined;
  open: { handlers: ListenHandlers; closed: boolean; checks: number }[] = [];

  async listen(_channel: string, handlers: ListenHandlers): Promise<Listening> {
    this.attempts.push(Date.now());
    if (this.hold) await this.hold;
    if (this.refuse > 0) {
      this.refuse--;
      throw new Error('connection refused');
    }
    const conn = { handlers, closed: false, checks: 0 };
    this.open.push(conn);
    return {
      close: async () => void (conn.closed = true),
      check: async () => void conn.checks++,
    };
  }

  get live(): number {
    return this.open.filter((c) => !c.closed).length;
  }
}

let driver: FakeDriver;
let notifier: Notifier;
let log: string[];
let t0: number;

function newNotifier(checkIntervalMs = 0): Notifier {
  const n = new Notifier(driver as unknown as Driver, 'ch', checkIntervalMs);
  n.on('listening', () => log.push(`listening ${Date.now() - t0}`));
  n.on('connectionError', (err) => log.push(`error ${Date.now() - t0} ${err.message}`));
  return n;
}

/** Attempt times relative to the start. */
function attempts(): number[] {
  return driver.attempts.map((t) => t - t0);
}

beforeEach(() => {
  vi.useFakeTimers();
  vi.spyOn(Math, 'random').mockReturnValue(1); // the backoff's nominal delays: 100, 200, 400, ...
  driver = new FakeDriver();
  log = [];
  t0 = Date.now();
});
afterEach(async () => {
  await notifier?.stop();
  vi.restoreAllMocks();
  vi.useRealTimers();
});

describe('Notifier', () => {
  it('retries a failed connection with a growing backoff until LISTEN is in place', async () => {
    driver.refuse = 3;
    notifier = newNotifier();
    notifier.start();
    await vi.advanceTimersByTimeAsync(1_000);
    expect(attempts()).toEqual([0, 100, 300, 700]);
    expect(log).toEqual([
      'error 0 connection refused',
      'error 100 connection refused',
      'error 300 connection refused',
      'listening 700',
    ]);
    await vi.advanceTimersByTimeAsync(60_000);
    expect(driver.attempts).toHaveLength(4);
  });

  it('replaces a lost connection, the backoff starting over after the success', async () => {
    driver.refuse = 2;
    notifier = newNotifier();
    notifier.start();
    await vi.advanceTimersByTimeAsync(300);
    expect(driver.live).toBe(1);
    const lostAt = Date.now() - t0;
    // As the drivers do: the connection is gone, then lost() is called.
    driver.open[0]!.closed = true;
    driver.open[0]!.handlers.lost(new Error('terminating connection'));
    await vi.advanceTimersByTimeAsync(100);
    expect(attempts()).toEqual([0, 100, 300, lostAt + 100]);
    expect(log.slice(-2)).toEqual([`error ${lostAt} terminating connection`, `listening ${lostAt + 100}`]);
    expect(driver.live).toBe(1);
  });

  it('checks the open connection every checkIntervalMs, and not after stop()', async () => {
    notifier = newNotifier(1_000);
    notifier.start();
    await vi.advanceTimersByTimeAsync(3_500);
    expect(driver.open[0]!.checks).toBe(3);
    await notifier.stop();
    expect(driver.live).toBe(0);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(driver.open[0]!.checks).toBe(3);
  });

  it('opens nothing after stop(): an attempt in flight closes what it got, quietly', async () => {
    let answer!: () => void;
    driver.hold = new Promise<void>((resolve) => (answer = resolve));
    driver.refuse = 0;
    notifier = newNotifier();
    notifier.start();
    await notifier.stop();
    answer();
    await vi.advanceTimersByTimeAsync(60_000);
    expect(driver.attempts).toHaveLength(1);
    expect(driver.live).toBe(0);
    expect(log).toEqual([]);
  });

  it('reports no error for a failed attempt that ends after stop(), and does not retry it', async () => {
    let answer!: () => void;
    driver.hold = new Promise<void>((resolve) => (answer = resolve));
    driver.refuse = 1;
    notifier = newNotifier();
    notifier.start();
    await notifier.stop();
    answer();
    await vi.advanceTimersByTimeAsync(60_000);
    expect(driver.attempts).toHaveLength(1);
    expect(log).toEqual([]);
  });
});
