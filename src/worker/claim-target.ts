import type { JobRow } from '../job.js';

/** What the fetch loop claims for: the worker's slots. */
export interface ClaimTarget {
  /** Jobs the worker may hold now: slots plus the prefetch in effect. */
  capacity(): number;
  /** Jobs a claim may ask for now. */
  wanted(): number;
  /** Jobs a claim of one limited queue may ask for now. */
  wantedIn(queue: string): number;
  /** Free slots: this many of a claim start at once, the rest are claimed ahead. */
  free(): number;
  /** Every job the worker holds: running, waiting, being handed back, or its result unwritten. */
  heldIds(): string[];
  /** Jobs a cycle claimed, and how long its round trip took. */
  claimed(jobs: JobRow[], roundTripMs: number): void;
}
