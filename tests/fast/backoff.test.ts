/**
 * The two delay policies: retryDelayMs (a failed job's next attempt) and Backoff
 * (a background loop that keeps failing). Random is injected, so the bounds are exact.
 */
import { describe, expect, it } from 'vitest';
import { Backoff } from '../../src/lifecycle/backoff.js';
import { retryDelayMs } from '../../src/worker/backoff.js';

describe('retryDelayMs', () => {
  const policy = { baseMs: 1_000, maxMs: 60_000 };

  it('counts attempt 0 (never claimed) like attempt 1', () => {
    expect(retryDelayMs(0, policy, () => 1)).toBe(retryDelayMs(1, policy, () => 1));
    expect(retryDelayMs(-3, policy, () => 0)).toBe(500);
  });

  it('stays between half and all of the nominal delay whatever the random draw', () => {
    for (const attempt of [1, 2, 5, 9]) {
      const nominal = Math.min(60_000, 1_000 * 2 ** (attempt - 1));
      for (const r of [0, 0.001, 0.25, 0.5, 0.999]) {
        const delay = retryDelayMs(attempt, policy, () => r);
        expect(delay).toBeGreaterThanOrEqual(nominal / 2);
        expect(delay).toBeLessThanOrEqual(nominal);
      }
    }
  });

  it('stays finite and capped for absurd attempt numbers, in every shape', () => {
    for (const shape of ['exponential', 'linear', 'fixed'] as const) {
      const delay = retryDelayMs(1e9, { ...policy, shape }, () => 1);
      expect(Number.isFinite(delay)).toBe(true);
      expect(delay).toBe(shape === 'fixed' ? 1_000 : 60_000);
    }
  });

  it('spreads jobs that failed together: different draws give different delays', () => {
    const delays = new Set([0, 0.2, 0.4, 0.6, 0.8].map((r) => retryDelayMs(4, policy, () => r)));
    expect(delays.size).toBe(5);
  });
});

describe('Backoff', () => {
  it('doubles from minMs and stops at maxMs', () => {
    const backoff = new Backoff({ minMs: 50, maxMs: 1_000 }, () => 1);
    expect(Array.from({ length: 7 }, () => backoff.next())).toEqual([50, 100, 200, 400, 800, 1_000, 1_000]);
  });

  it('waits at least half of each nominal delay', () => {
    const backoff = new Backoff({ minMs: 50, maxMs: 1_000 }, () => 0);
    expect(Array.from({ length: 6 }, () => backoff.next())).toEqual([25, 50, 100, 200, 400, 500]);
  });

  it('starts over from minMs after reset()', () => {
    const backoff = new Backoff({ minMs: 50, maxMs: 5_000 }, () => 1);
    backoff.next();
    backoff.next();
    backoff.next();
    backoff.reset();
    expect(backoff.next()).toBe(50);
    expect(backoff.next()).toBe(100);
  });

  it('keeps returning maxMs after thousands of failures (no overflow to Infinity or NaN)', () => {
    const backoff = new Backoff({ minMs: 50, maxMs: 5_000 }, () => 1);
    let last = 0;
    for (let i = 0; i < 5_000; i++) last = backoff.next();
    expect(last).toBe(5_000);
  });

  it('jitters each delay by the random draw', () => {
    const draws = [0, 0.5, 1];
    const backoff = new Backoff({ minMs: 100, maxMs: 100 }, () => draws.shift()!);
    expect([backoff.next(), backoff.next(), backoff.next()]).toEqual([50, 75, 100]);
  });
});
