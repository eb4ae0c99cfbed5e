import { describe, expect, it } from 'vitest';
import type { WorkerStore } from '../../src/db/store.js';
import type { ClaimTarget } from '../../src/worker/claim-target.js';
import { LimitedClaims } from '../../src/worker/limited-claims.js';

describe('LimitedClaims', () => {
  it('starts each round one queue further on, so the last listed is not always asked last (outside review 130)', async () => {
    const asked: string[] = [];
    const store = {
      claimLimited: (queue: string) => {
        asked.push(queue);
        return Promise.resolve({ jobs: [], retryAt: null });
      },
    } as unknown as WorkerStore;
    const target = { wantedIn: () => 1, free: () => 1, claimed: () => {} } as unknown as ClaimTarget;
    const noop = () => {};
    const claims = new LimitedClaims(
      store,
      { tasks: ['t'], batchSize: 10 },
      target,
      () => ({ jobs: 0, starts: 0 }),
      noop,
      noop,
      noop,
    );
    for (let round = 0; round < 4; round++) await claims.claim(['a', 'b', 'c'], 1, 1, []);
    // With one free slot, the queue asked first takes it: before, that was always 'a'.
    expect(asked).toEqual(['a', 'b', 'c', 'b', 'c', 'a', 'c', 'a', 'b', 'a', 'b', 'c']);
  });
});
