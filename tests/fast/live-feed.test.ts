import { EventEmitter } from 'node:events';
import type { ServerResponse } from 'node:http';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { LiveFeed, MAX_STREAMS, MAX_TOTAL_UNSENT_BYTES, MAX_UNSENT_BYTES } from '../../src/dashboard/live.js';
import type { Notifier } from '../../src/notify/listener.js';

/** A browser's response: what was written to it, and how much of it is still unsent. */
class FakeResponse extends EventEmitter {
  status = 0;
  written: string[] = [];
  writableLength = 0;
  destroyed = false;
  writeHead(status: number): this {
    this.status = status;
    return this;
  }
  write(text: string): boolean {
    this.written.push(text);
    return true;
  }
  end(text?: string): this {
    if (text) this.written.push(text);
    this.emit('close');
    return this;
  }
  destroy(): this {
    this.destroyed = true;
    this.emit('close');
    return this;
  }
  overviews(): number {
    return this.written.filter((t) => t.startsWith('event: overview')).length;
  }
}

function feed(loadMs = 20): { live: LiveFeed; loads: () => number; notifier: EventEmitter } {
  let loads = 0;
  const notifier = Object.assign(new EventEmitter(), { start: () => {}, stop: async () => {} });
  const live = new LiveFeed({
    load: async () => {
      loads++;
      await new Promise((resolve) => setTimeout(resolve, loadMs));
      return { queues: [], n: loads };
    },
    notifier: notifier as unknown as Notifier,
    refreshMs: 60_000,
    onError: () => {},
  });
  return { live, loads: () => loads, notifier };
}

const attach = (live: LiveFeed) => {
  const res = new FakeResponse();
  live.attach(res as unknown as ServerResponse);
  return res;
};

describe('LiveFeed', () => {
  // A clock of its own: the fast files share a thread, and real timers there are not always real.
  beforeEach(() => void vi.useFakeTimers());
  afterEach(() => void vi.useRealTimers());

  it('serves browsers that arrive together with one read, each getting the overview (outside review 125)', async () => {
    const { live, loads } = feed();
    const browsers = Array.from({ length: 50 }, () => attach(live));
    await vi.advanceTimersByTimeAsync(200);
    expect(loads()).toBe(1);
    for (const b of browsers) expect(b.overviews()).toBeGreaterThanOrEqual(1);
    // A later one, while the overview is fresh, gets it without a read.
    const late = attach(live);
    expect(late.overviews()).toBe(1);
    expect(loads()).toBe(1);
    await live.close();
  });

  it('spaces the re-reads that notifications ask for by how long a read takes (outside review 255)', async () => {
    // A read of 2 s under a notification every 100 ms: re-read 1 s after each read
    // began, one ran all the time (15 in 30 s). Now each waits 4 reads' time after the last.
    const { live, loads, notifier } = feed(2_000);
    const browser = attach(live);
    await vi.advanceTimersByTimeAsync(2_100);
    expect(loads()).toBe(1);
    for (let t = 0; t < 30_000; t += 100) {
      notifier.emit('wake', { queue: 'q' });
      await vi.advanceTimersByTimeAsync(100);
    }
    expect(loads()).toBeGreaterThanOrEqual(3);
    expect(loads()).toBeLessThanOrEqual(4);
    // A change during a read is read once that read is done, not left to refreshMs.
    const before = loads();
    await vi.advanceTimersByTimeAsync(10_500);
    expect(loads()).toBe(before + 1);
    await vi.advanceTimersByTimeAsync(15_000); // before refreshMs (60 s) comes round
    expect(loads()).toBe(before + 1);
    expect(browser.overviews()).toBe(loads());
    await live.close();
  });

  it('cuts the stream of a browser that does not read it, and keeps writing to the others', async () => {
    const { live, notifier } = feed();
    const reader = attach(live);
    const stalled = attach(live);
    await vi.advanceTimersByTimeAsync(100);
    stalled.writableLength = MAX_UNSENT_BYTES + 1;
    notifier.emit('wake', { queue: 'q' });
    await vi.advanceTimersByTimeAsync(300);
    expect(stalled.destroyed).toBe(true);
    expect(reader.destroyed).toBe(false);
    expect(reader.written.some((t) => t.startsWith('event: jobs'))).toBe(true);
    expect(live.watchers).toBe(1);
    await live.close();
  });

  it('cuts the streams furthest behind while all together hold too much unsent (outside review 127)', async () => {
    const { live, notifier } = feed();
    const browsers = Array.from({ length: 20 }, () => attach(live));
    await vi.advanceTimersByTimeAsync(100);
    // Each under its own limit, 80 MiB together; the first four the furthest behind.
    browsers.forEach((b, i) => (b.writableLength = 4 * 1024 * 1024 + (i < 4 ? 1 : 0)));
    notifier.emit('wake', { queue: 'q' });
    await vi.advanceTimersByTimeAsync(300);
    expect(browsers.map((b) => b.destroyed)).toEqual(browsers.map((_, i) => i < 4));
    expect(live.watchers).toBe(16);
    expect(16 * 4 * 1024 * 1024).toBeLessThanOrEqual(MAX_TOTAL_UNSENT_BYTES);
    await live.close();
  });

  it(`refuses a stream past ${MAX_STREAMS} with a 503`, async () => {
    const { live } = feed();
    for (let i = 0; i < MAX_STREAMS; i++) attach(live);
    const extra = attach(live);
    expect(extra.status).toBe(503);
    expect(live.watchers).toBe(MAX_STREAMS);
    await vi.advanceTimersByTimeAsync(100); // the first read ends
    await live.close();
  });
});

describe("the LISTEN connection's errors (outside review 231)", () => {
  it('are told once per outage and cause, not at every reconnect attempt; again after it listened', async () => {
    const notifier = Object.assign(new EventEmitter(), { start: () => {}, stop: async () => {} });
    const told: string[] = [];
    const live = new LiveFeed({
      load: async () => ({ queues: [] }),
      notifier: notifier as unknown as Notifier,
      refreshMs: 60_000,
      onError: (err) => told.push((err as Error).message),
    });
    for (let i = 0; i < 5; i++) notifier.emit('connectionError', new Error('role "nouser" does not exist'));
    notifier.emit('connectionError', new Error('connect ECONNREFUSED'));
    expect(told).toEqual(['role "nouser" does not exist', 'connect ECONNREFUSED']);
    notifier.emit('listening');
    notifier.emit('connectionError', new Error('connect ECONNREFUSED'));
    expect(told).toHaveLength(3);
    await live.close();
  });
});
