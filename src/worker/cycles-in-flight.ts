/**
 * Cycles in flight at once, each on a connection of its own. One cycle at a time
 * leaves the worker idle for every round trip (it has run what it holds and waits
 * for the claim), and Postgres idle while the worker runs; a second cycle sent
 * while the first is out overlaps the two. More would only queue behind each
 * other in Postgres, and each cycle needs a pooled connection.
 */
export const MAX_CYCLES_IN_FLIGHT = 2;

/**
 * The statements the fetch loop has out, and the jobs their claims asked for: a
 * new claim counts those as taken, so together the claims never ask for more than
 * the slots and prefetch allow.
 */
export class CyclesInFlight {
  private readonly out = new Set<Promise<void>>();
  /** Jobs the cycles in flight asked for, not back yet. */
  private asked = 0;
  /** Of those, how many their claims start at once (free slots promised to them). */
  private starts = 0;

  get size(): number {
    return this.out.size;
  }

  get full(): boolean {
    return this.out.size >= MAX_CYCLES_IN_FLIGHT;
  }

  get requested(): number {
    return this.asked;
  }

  get startsRequested(): number {
    return this.starts;
  }

  /**
   * Tracks `send()`, which asks for `limit` jobs and starts `startNow` of them. Its
   * mark is cleared before anyone awaiting the result runs, so a follow-up kick
   * starts a cycle instead of being folded into one that has already ended.
   */
  track<T>(limit: number, startNow: number, send: () => Promise<T>): Promise<T> {
    this.asked += limit;
    this.starts += startNow;
    const sent = send().finally(() => {
      this.asked -= limit;
      this.starts -= startNow;
      this.out.delete(done);
    });
    const done = sent.then(() => {});
    this.out.add(done);
    return sent;
  }

  /** Resolves once every cycle out now is back (not those sent later); undefined when at most one is out. */
  othersBack(): Promise<void> | undefined {
    if (this.out.size < 2) return undefined;
    return Promise.allSettled(this.out).then(() => {});
  }

  /** Resolves once no cycle is out, those sent meanwhile included. */
  async settled(): Promise<void> {
    while (this.out.size > 0) await Promise.all(this.out);
  }
}
