import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Queryable } from '../../src/db/executor.js';
import { ListenProbe } from '../../src/worker/listen-probe.js';

/** A pool whose NOTIFYs wait until released, and the probe ids they carried. */
function slowPool() {
  const sent: { id: string; release: () => void; fail: () => void }[] = [];
  const db = {
    query: (_text: string, values: unknown[]) =>
      new Promise((resolve, reject) => {
        const id = (JSON.parse(values[1] as string) as { id: string }).id;
        sent.push({ id, release: () => resolve({ rows: [] }), fail: () => reject(new Error('connection lost')) });
      }),
  } as unknown as Queryable;
  return { db, sent };
}

/** Fake timers, a slow pool and a probe on it, started. */
function started() {
  vi.useFakeTimers();
  const { db, sent } = slowPool();
  const deaf = vi.fn();
  const probe = new ListenProbe(db, 's', deaf, () => {});
  probe.start();
  return { sent, deaf, probe };
}

afterEach(() => {
  vi.useRealTimers();
});

describe('ListenProbe', () => {
  it('waits its 10 s from the NOTIFY commit, not from the send: a pool busy at start is no deaf LISTEN (outside review 132)', async () => {
    const { sent, deaf, probe } = started();
    await vi.advanceTimersByTimeAsync(30_000); // the NOTIFY waits for a client all this time
    expect(deaf).not.toHaveBeenCalled();
    sent[0]!.release();
    await vi.advanceTimersByTimeAsync(9_000);
    expect(deaf).not.toHaveBeenCalled();
    await vi.advanceTimersByTimeAsync(2_000);
    expect(deaf).toHaveBeenCalledTimes(1);
    probe.start(); // one verdict per worker
    expect(sent).toHaveLength(1);
  });

  it('a probe heard is a verdict: no warning, no second probe', async () => {
    vi.useFakeTimers();
    const { db, sent } = slowPool();
    const deaf = vi.fn();
    const heard = vi.fn();
    const probe = new ListenProbe(db, 's', deaf, heard);
    probe.start();
    sent[0]!.release();
    await vi.advanceTimersByTimeAsync(5);
    probe.heard('someone-else');
    probe.heard(sent[0]!.id);
    await vi.advanceTimersByTimeAsync(60_000);
    expect(heard).toHaveBeenCalledTimes(1);
    expect(deaf).not.toHaveBeenCalled();
    probe.start();
    expect(sent).toHaveLength(1);
  });

  it('LISTEN lost before the verdict, or the NOTIFY failing: no warning, and the next LISTEN probes again', async () => {
    const { sent, deaf, probe } = started();
    sent[0]!.release();
    await vi.advanceTimersByTimeAsync(3_000);
    probe.cancel(); // LISTEN lost
    await vi.advanceTimersByTimeAsync(20_000);
    expect(deaf).not.toHaveBeenCalled();
    probe.start();
    sent[1]!.fail();
    await vi.advanceTimersByTimeAsync(20_000);
    expect(deaf).not.toHaveBeenCalled();
    probe.start();
    expect(sent).toHaveLength(3);
    sent[2]!.release();
    await vi.advanceTimersByTimeAsync(10_001);
    expect(deaf).toHaveBeenCalledTimes(1);
  });
});
