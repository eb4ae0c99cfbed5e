import { randomBytes } from 'node:crypto';
import type { Queryable } from '../db/executor.js';
import { controlStatements } from '../db/statements/control.js';
import { channelFor } from '../db/identifiers.js';
import { encodeControl } from '../notify/codec.js';

/** How long a probe's notification may take to arrive, once sent, before LISTEN is taken for deaf. */
export const PROBE_WAIT_MS = 10_000;

/**
 * A worker's check, once LISTEN is in place, that its LISTEN connection hears a
 * notification its pool sends. Behind a transaction-mode pooler (PgBouncer)
 * LISTEN is accepted and hears nothing: the worker fell back to polling, 2 s of
 * pick-up latency, without a word (outside reviews 129, 131). The wait starts once
 * the NOTIFY has committed (outside review 132: a pool busy at start made a probe
 * still waiting for a client look unheard). A probe that could not be sent, or a
 * LISTEN lost before the verdict, says nothing, and the next LISTEN probes again.
 * One verdict per worker: heard, or `deaf` called.
 */
export class ListenProbe {
  private pending: { id: string; timer?: NodeJS.Timeout; sentAt?: number } | undefined;
  private decided = false;

  constructor(
    private readonly db: Queryable,
    private readonly schema: string,
    private readonly deaf: () => void,
    private readonly heardAfter: (ms: number) => void,
    private readonly waitMs = PROBE_WAIT_MS,
  ) {}

  /** LISTEN is in place: sends a probe, unless one is out or a verdict was reached. */
  start(): void {
    if (this.decided || this.pending) return;
    const probe: { id: string; timer?: NodeJS.Timeout; sentAt?: number } = { id: randomBytes(8).toString('hex') };
    this.pending = probe;
    const message = encodeControl({ c: 'probe', id: probe.id });
    this.db.query(controlStatements(this.schema).probeListen, [channelFor(this.schema), message]).then(
      () => {
        if (this.pending !== probe) return; // heard already, or cancelled
        probe.sentAt = performance.now();
        probe.timer = setTimeout(() => {
          if (this.pending !== probe) return;
          this.pending = undefined;
          this.decided = true;
          this.deaf();
        }, this.waitMs);
        probe.timer.unref();
      },
      () => this.cancel(),
    );
  }

  /** A probe arrived on LISTEN: heard, if it is this worker's. */
  heard(id: string): void {
    const probe = this.pending;
    if (probe?.id !== id) return;
    this.cancel();
    this.decided = true;
    // Heard before the NOTIFY's own reply came back: as good as at once.
    this.heardAfter(probe.sentAt === undefined ? 0 : performance.now() - probe.sentAt);
  }

  /** LISTEN was lost, or the worker stops: no verdict (the next start() probes again). */
  cancel(): void {
    clearTimeout(this.pending?.timer);
    this.pending = undefined;
  }
}
