import { describe, expect, it } from 'vitest';
import type { WorkerStore } from '../../src/db/worker-store.js';
import type { ClaimTarget } from '../../src/worker/claim-target.js';
import { LimitedClaims } from '../../src/worker/limited-claims.js';

/** LimitedClaims over `store`, one free slot wanted in every queue; `wakeAt` hears the looks it schedules. */
function limitedClaims(
  store: Partial<WorkerStore>,
  wakeAt: (at: number) => void = () => {},
  now: () => number = Date.now,
): LimitedClaims {
  const target = { wantedIn: () => 1, free: () => 1, claimed: () => {} } as unknown as ClaimTarget;
  const noop = () => {};
  return new LimitedClaims(
    store as WorkerStore,
    { tasks: ['t'], batchSize: 10 },
    target,
    () => ({ jobs: 0, starts: 0 }),
    wakeAt,
    noop,
    noop,
    now,
  );
}

describe('LimitedClaims', () => {
  it('starts each round after the queue that claimed first, so the last listed is not always asked last (outside reviews 130, 133)', async () => {
    const asked: string[] = [];
    let giving = true;
    const claims = limitedClaims({
      claimLimited: (queue: string) => {
        asked.push(queue);
        return Promise.resolve({ jobs: giving ? [{ id: `${asked.length}`, queue }] : [], retryAt: null });
      },
    } as unknown as Partial<WorkerStore>);
    // Each round follows a wake for every queue (a round unstirred leaves out the queues found empty: see below).
    const round = async (queues: string[]) => {
      claims.stir();
      asked.length = 0;
      await claims.claim(queues, 1, 1, []);
      return asked[0];
    };
    // With one free slot, the queue asked first takes it: before, that was always 'a'.
    expect([await round(['a', 'b', 'c']), await round(['a', 'b', 'c']), await round(['a', 'b', 'c'])]).toEqual(['a', 'b', 'c']);
    // Rounds that find nothing (the slot went to a plain queue this time) keep the turn:
    // with two limited queues, counting every round gave the same one every turn that had a slot.
    const firsts: (string | undefined)[] = [];
    for (let i = 0; i < 6; i++) {
      giving = i % 2 === 0;
      const first = await round(['a', 'b']);
      if (giving) firsts.push(first);
    }
    expect(firsts).toEqual(['b', 'a', 'b']);
  });

  it('leaves a queue found empty out of the rounds for 250 ms, unless stirred for it or for all (outside review 275)', async () => {
    const asked: string[] = [];
    let now = 1_000_000;
    const busy = new Set(['busy']);
    const claims = limitedClaims(
      {
        claimLimited: (queue: string) => {
          asked.push(queue);
          return Promise.resolve({ jobs: busy.has(queue) ? [{ id: '1', queue }] : [], retryAt: null });
        },
        hasDueJobs: () => Promise.resolve(true),
      } as unknown as Partial<WorkerStore>,
      () => {},
      () => now,
    );
    const round = async () => {
      asked.length = 0;
      await claims.claim(['busy', 'e1', 'e2'], 1, 1, []);
      return [...asked].sort();
    };
    expect(await round()).toEqual(['busy', 'e1', 'e2']);
    // Found empty, and nothing stirred for them: only the busy queue is asked.
    expect(await round()).toEqual(['busy']);
    now += 100;
    expect(await round()).toEqual(['busy']);
    // A stir for one queue (its notification, its job ending here) brings it back alone.
    claims.stir('e1');
    expect(await round()).toEqual(['busy', 'e1']);
    expect(await round()).toEqual(['busy']);
    // A stir for all (a poll tick, a due time) brings them all back.
    claims.stir();
    expect(await round()).toEqual(['busy', 'e1', 'e2']);
    // And 250 ms after it was found empty, a queue is asked again unstirred.
    now += 249;
    expect(await round()).toEqual(['busy']);
    now += 1;
    expect(await round()).toEqual(['busy', 'e1', 'e2']);
    // A stir during its claim keeps the queue in: what woke it may have come after the claim read.
    const claimsStirred = limitedClaims({
      claimLimited: (queue: string) => {
        asked.push(queue);
        if (queue === 'e1') claimsStirred.stir('e1');
        return Promise.resolve({ jobs: [], retryAt: null });
      },
      hasDueJobs: () => Promise.resolve(true),
    } as unknown as Partial<WorkerStore>);
    await claimsStirred.claim(['e1', 'e2'], 1, 1, []);
    asked.length = 0;
    await claimsStirred.claim(['e1', 'e2'], 1, 1, []);
    expect(asked).toEqual(['e1']);
  });

  it('looks again within 25-1000 ms while limits hold due jobs back, one look at a time; quiet when none are due (issue 16, outside review 143)', async () => {
    let giving = false;
    let due = true;
    const wakes: number[] = [];
    let now = 1_000_000;
    const claims = limitedClaims(
      {
        claimLimited: (queue: string) => Promise.resolve({ jobs: giving ? [{ id: '1', queue }] : [], retryAt: null }),
        hasDueJobs: () => Promise.resolve(due),
      } as unknown as Partial<WorkerStore>,
      (at) => wakes.push(at),
      () => now,
    );
    // Each round follows a wake (the look scheduled here, a poll tick, a finished job here).
    const round = async () => {
      claims.stir();
      wakes.length = 0;
      await claims.claim(['q'], 1, 1, []);
      return wakes.map((at) => at - now);
    };
    const delays: number[] = [];
    for (let i = 0; i < 8; i++) {
      const [delay, ...more] = await round();
      expect(more).toEqual([]);
      delays.push(delay!);
      // Rounds before the look comes (poll ticks, say) schedule none of their own.
      for (let tick = 0; tick < 3; tick++) {
        now += Math.floor(delay! / 4);
        expect(await round()).toEqual([]);
      }
      now += delay!;
    }
    // Doubling from 25 ms (each between half and all of its nominal delay), at most 1 s.
    delays.forEach((ms, i) => {
      const nominal = Math.min(1_000, 25 * 2 ** i);
      expect(ms).toBeGreaterThanOrEqual(nominal / 2);
      expect(ms).toBeLessThanOrEqual(nominal);
    });
    expect(claims.quiet).toBe(false);
    // A claim that gets jobs starts again at 25 ms, at once.
    const [pending] = await round();
    giving = true;
    expect(await round()).toEqual([]);
    giving = false;
    const [first] = await round();
    expect(first).toBeLessThanOrEqual(25);
    expect(pending).toBeGreaterThan(400);
    // Nothing due: quiet, and no look scheduled.
    due = false;
    now += 2_000;
    expect(await round()).toEqual([]);
    expect(claims.quiet).toBe(true);
  });
});
