/**
 * ProgressWriter: the newest progress of each job, written at most once per
 * interval in one statement for all jobs; nothing written once stopped.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ProgressWriter } from '../../src/worker/progress.js';
import { MemoryDatabase, type MemoryStore } from '../helpers/memory-store.js';

let db: MemoryDatabase;
let store: MemoryStore;
let errors: unknown[];
let writer: ProgressWriter;
let ids: string[];

function progressOps(): number {
  return db.log.filter((e) => e.op === 'progress').length;
}

beforeEach(async () => {
  vi.useFakeTimers();
  db = new MemoryDatabase();
  store = db.store('w1');
  errors = [];
  writer = new ProgressWriter(store, 1_000, (err) => errors.push(err));
  db.addMany(3, 't');
  ids = (await store.claim(3)).map((j) => j.id);
});
afterEach(() => {
  vi.useRealTimers();
});

describe('ProgressWriter', () => {
  it('writes the first report without waiting', async () => {
    writer.report(ids[0]!, '{"pct":5}');
    await vi.advanceTimersByTimeAsync(0);
    expect(db.job(ids[0]!).progress).toEqual({ pct: 5 });
  });

  it('keeps only the newest value per job and writes all jobs in one statement per interval', async () => {
    writer.report(ids[0]!, '{"pct":1}');
    await vi.advanceTimersByTimeAsync(0);
    for (let pct = 2; pct <= 500; pct++) writer.report(ids[pct % 2]!, JSON.stringify({ pct }));
    writer.report(ids[2]!, '{"pct":7}');
    await vi.advanceTimersByTimeAsync(999);
    expect(progressOps()).toBe(1);
    await vi.advanceTimersByTimeAsync(1);
    expect(progressOps()).toBe(2);
    expect(ids.map((id) => db.job(id).progress)).toEqual([{ pct: 500 }, { pct: 499 }, { pct: 7 }]);
  });

  it('a report long after the last write goes out at once', async () => {
    writer.report(ids[0]!, '1');
    await vi.advanceTimersByTimeAsync(5_000);
    writer.report(ids[0]!, '2');
    await vi.advanceTimersByTimeAsync(0);
    expect(db.job(ids[0]!).progress).toBe(2);
  });

  it('loses no report made while a write is in flight', async () => {
    const open = db.holdNext('progress');
    writer.report(ids[0]!, '1');
    await vi.advanceTimersByTimeAsync(0);
    writer.report(ids[1]!, '2');
    open();
    await vi.advanceTimersByTimeAsync(1_000);
    expect([db.job(ids[0]!).progress, db.job(ids[1]!).progress]).toEqual([1, 2]);
  });

  it('sends a report again when its row was held by another session, unless a newer one came', async () => {
    const commit = db.lockJob(ids[0]!);
    writer.report(ids[0]!, '1');
    writer.report(ids[1]!, '2');
    await vi.advanceTimersByTimeAsync(0);
    expect([db.job(ids[0]!).progress, db.job(ids[1]!).progress]).toEqual([undefined, 2]);
    await vi.advanceTimersByTimeAsync(1_000); // still held: tried again, skipped again
    expect(progressOps()).toBe(2);
    commit();
    await vi.advanceTimersByTimeAsync(1_000);
    expect(db.job(ids[0]!).progress).toBe(1);
    expect(progressOps()).toBe(3);
    // Written: not sent again.
    await vi.advanceTimersByTimeAsync(5_000);
    expect(progressOps()).toBe(3);
  });

  it('does not send again the report of a job that ended meanwhile', async () => {
    const commit = db.lockJob(ids[0]!);
    writer.report(ids[0]!, '1');
    await vi.advanceTimersByTimeAsync(0);
    writer.ended(ids[0]!);
    commit();
    await vi.advanceTimersByTimeAsync(5_000);
    expect(progressOps()).toBe(1);
  });

  it('reports a failed write and keeps writing later reports', async () => {
    db.failNext('progress');
    writer.report(ids[0]!, '1');
    await vi.advanceTimersByTimeAsync(0);
    expect(errors).toHaveLength(1);
    writer.report(ids[0]!, '2');
    await vi.advanceTimersByTimeAsync(1_000);
    expect(db.job(ids[0]!).progress).toBe(2);
  });

  it('stop() writes what is pending at once, then accepts no more', async () => {
    writer.report(ids[0]!, '1');
    await vi.advanceTimersByTimeAsync(0);
    writer.report(ids[0]!, '2'); // would wait for the interval
    await writer.stop();
    expect(db.job(ids[0]!).progress).toBe(2);
    writer.report(ids[0]!, '3');
    await vi.advanceTimersByTimeAsync(5_000);
    expect(db.job(ids[0]!).progress).toBe(2);
    expect(progressOps()).toBe(2);
  });

  // Handlers still run while the worker stops; one that reports during the final
  // write must not get a statement sent after stop() resolved (the worker closes
  // its connections next).
  it('sends no statement after stop() resolved, even for a report made during its final write', async () => {
    writer.report(ids[0]!, '1');
    const open = db.holdNext('progress');
    const stopped = writer.stop();
    await vi.advanceTimersByTimeAsync(0);
    writer.report(ids[1]!, '9');
    open();
    await stopped;
    const sentByStop = progressOps();
    await vi.advanceTimersByTimeAsync(5_000);
    expect(progressOps(), 'progress statements sent after stop() resolved').toBe(sentByStop);
  });
});
