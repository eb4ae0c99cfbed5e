/**
 * How long a partition's relay waits while committed messages wait behind a
 * transaction still open: doubling from horizonRetryMs, capped (outside review 74:
 * ~90 passes a second for as long as an idle-in-transaction session lasted).
 */
import { describe, expect, it } from 'vitest';
import { horizonDelay } from '../../src/outbox/relay-pacing.js';

describe('horizonDelay', () => {
  it('doubles from horizonRetryMs up to 200 ms', () => {
    const o = { horizonRetryMs: 10, pollIntervalMs: 1000 };
    expect([1, 2, 3, 4, 5, 6, 7, 100].map((n) => horizonDelay(n, o))).toEqual([10, 20, 40, 80, 160, 200, 200, 200]);
  });

  it('is capped by a shorter poll interval, never below horizonRetryMs', () => {
    expect([1, 2, 3].map((n) => horizonDelay(n, { horizonRetryMs: 10, pollIntervalMs: 30 }))).toEqual([10, 20, 30]);
    expect(horizonDelay(5, { horizonRetryMs: 500, pollIntervalMs: 100 })).toBe(500);
  });
});
