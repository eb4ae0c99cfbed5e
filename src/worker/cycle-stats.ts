/** Counters of the fetch loop, for benchmarks and monitoring. */
export interface FetchLoopStats {
  /** Statements sent (each writes results and/or claims). */
  cycles: number;
  /** Cycles that asked for jobs. */
  claims: number;
  /** Cycles that asked for jobs and got none: the cost of a wake-up with nothing to do. */
  emptyClaims: number;
  /** Jobs claimed. */
  claimed: number;
  /** Cycles sent while another was in flight. */
  overlapped: number;
  /** Jobs a claim whose reply was lost had locked to this worker, given back unrun (attempts not spent). */
  orphansReleased: number;
}

/** The fetch loop's counters, counted as its statements come back. */
export class CycleStats implements FetchLoopStats {
  cycles = 0;
  claims = 0;
  emptyClaims = 0;
  claimed = 0;
  overlapped = 0;
  orphansReleased = 0;

  /** A cycle came back with `claimed` jobs of the `limit` it asked for (0: it asked for none). */
  cycle(limit: number, claimed: number): void {
    this.cycles++;
    if (limit > 0) this.claim(claimed);
  }

  /** A claim came back with `claimed` jobs. */
  claim(claimed: number): void {
    this.claims++;
    this.claimed += claimed;
    if (claimed === 0) this.emptyClaims++;
  }
}
