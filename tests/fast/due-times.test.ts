/**
 * DueTimes: every known due time wakes the worker once it has come, through one
 * timer, whatever order they were learnt in.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { DueTimes } from '../../src/worker/due-times.js';

/** Date.now() at the start of each test. */
const T0 = Date.UTC(2030, 0, 1);
const DAY = 86_400_000;

let calls: number[];
let due: DueTimes;

beforeEach(() => {
  vi.useFakeTimers({ now: T0 });
  calls = [];
  due = new DueTimes(() => calls.push(Date.now() - T0));
});
afterEach(() => {
  due.clear();
  vi.useRealTimers();
});

describe('DueTimes', () => {
  it('calls due at once, without waiting, for a time that has already come', () => {
    due.add(T0);
    due.add(T0 - 5_000);
    expect(calls).toEqual([0, 0]);
    expect(due.size).toBe(0);
  });

  it('calls due just after the time (a claim at exactly run_at must find the job due), not before', async () => {
    due.add(T0 + 200);
    await vi.advanceTimersByTimeAsync(200);
    expect(calls).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(calls).toEqual([201]);
    expect(due.size).toBe(0);
  });

  it('wakes at every known time, not only the earliest, whatever order they came in', async () => {
    due.add(T0 + 300);
    due.add(T0 + 100);
    due.add(T0 + 200);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(calls).toEqual([101, 201, 301]);
  });

  it('an earlier time learnt later is not delayed by the timer set for a later one', async () => {
    due.add(T0 + 5_000);
    await vi.advanceTimersByTimeAsync(100);
    due.add(T0 + 150);
    await vi.advanceTimersByTimeAsync(51);
    expect(calls).toEqual([151]);
    await vi.advanceTimersByTimeAsync(5_000);
    expect(calls).toEqual([151, 5_001]);
  });

  it('wakes once for the same time learnt twice', async () => {
    due.add(T0 + 100);
    due.add(T0 + 100);
    expect(due.size).toBe(1);
    await vi.advanceTimersByTimeAsync(500);
    expect(calls).toEqual([101]);
  });

  it('wakes once for times that come together', async () => {
    due.add(T0 + 100);
    due.add(T0 + 101);
    await vi.advanceTimersByTimeAsync(500);
    expect(calls).toEqual([101]);
    expect(due.size).toBe(0);
  });

  it('forgets everything on clear()', async () => {
    due.add(T0 + 100);
    due.add(T0 + 200);
    due.clear();
    expect(due.size).toBe(0);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(calls).toEqual([]);
    due.add(T0 + 1_100); // still usable afterwards
    await vi.advanceTimersByTimeAsync(101);
    expect(calls).toEqual([1_101]);
  });

  it('keeps at most 1,000 times, dropping the latest (the poll finds those)', async () => {
    for (let i = 1; i <= 1_001; i++) due.add(T0 + i * 10);
    expect(due.size).toBe(1_000);
    await vi.advanceTimersByTimeAsync(20_000);
    expect(calls).toHaveLength(1_000);
    expect(calls.at(-1)).toBe(10_001);
  });

  it('keeps the earliest when full, even when it is learnt last', async () => {
    for (let i = 1; i <= 1_000; i++) due.add(T0 + 1_000 + i);
    due.add(T0 + 50);
    expect(due.size).toBe(1_000);
    await vi.advanceTimersByTimeAsync(51);
    expect(calls).toEqual([51]);
  });

  // setTimeout() runs a delay above 2^31-1 ms (about 24.8 days) after 1 ms (Node
  // prints a TimeoutOverflowWarning). A job snoozed or retried a month ahead, or a
  // wake hint for a job enqueued to run next month, must not wake the worker now.
  it('does not wake before a time more than 24.8 days away', async () => {
    due.add(T0 + 30 * DAY);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(calls.length, 'wake-ups in the first second').toBe(0);
    expect(due.size).toBe(1);
  });
});
