import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { WakeCooldown } from '../../src/worker/wake-cooldown.js';

describe('WakeCooldown', () => {
  let wakes: number;
  let wakeAts: number[];
  let cooldown: WakeCooldown;
  beforeEach(() => {
    vi.useFakeTimers({ now: 1_000_000 });
    wakes = 0;
    wakeAts = [];
    cooldown = new WakeCooldown(
      25,
      () => wakes++,
      (at) => wakeAts.push(at),
    );
  });
  afterEach(() => {
    cooldown.stop();
    vi.useRealTimers();
  });

  it('passes a notification straight on when the last claim found jobs (or before any claim)', () => {
    cooldown.notified(Date.now());
    cooldown.claimed(3);
    cooldown.notified(Date.now());
    expect(wakeAts).toEqual([Date.now(), Date.now()]);
    expect(wakes).toBe(0);
  });

  it('one empty claim is not enough: a lone worker gets one when a claim took the job of a notification on its way', () => {
    cooldown.claimed(0);
    cooldown.notified(Date.now());
    expect(wakeAts).toHaveLength(1);
  });

  it('after two empty claims in a row merges the notifications of the cooldown into one wake at its end', () => {
    cooldown.claimed(0);
    cooldown.claimed(0);
    for (let i = 0; i < 10; i++) {
      cooldown.notified(Date.now());
      vi.advanceTimersByTime(2);
    }
    expect(wakes + wakeAts.length).toBe(0);
    vi.advanceTimersByTime(5);
    expect(wakes).toBe(1);
    expect(wakeAts).toEqual([]);
    // The cooldown is over: the next notification goes through at once.
    cooldown.notified(Date.now());
    expect(wakeAts).toHaveLength(1);
  });

  it('doubles the cooldown with each further empty claim, up to 16 times the setting', () => {
    const waits: number[] = [];
    for (let i = 0; i < 7; i++) {
      cooldown.claimed(0);
      if (i === 0) continue;
      const before = Date.now();
      cooldown.notified(Date.now());
      vi.advanceTimersToNextTimer();
      waits.push(Date.now() - before);
    }
    expect(waits).toEqual([25, 50, 100, 200, 400, 400]);
    cooldown.claimed(1);
    cooldown.notified(Date.now());
    expect(wakeAts).toHaveLength(1);
  });

  it('never holds back a job due later (its own timer) and is off at 0 ms', () => {
    cooldown.claimed(0);
    cooldown.claimed(0);
    cooldown.notified(Date.now() + 5_000);
    expect(wakeAts).toEqual([Date.now() + 5_000]);
    const off = new WakeCooldown(
      0,
      () => wakes++,
      (at) => wakeAts.push(at),
    );
    off.claimed(0);
    off.claimed(0);
    off.notified(Date.now());
    expect(wakeAts).toHaveLength(2);
  });

  it('stop() drops a merged wake that has not fired', () => {
    cooldown.claimed(0);
    cooldown.claimed(0);
    cooldown.notified(Date.now());
    cooldown.stop();
    vi.advanceTimersByTime(100);
    expect(wakes).toBe(0);
  });
});
