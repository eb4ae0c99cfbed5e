import { randomBytes } from 'node:crypto';
import type { Queryable } from '../db/executor.js';
import { controlStatements } from '../db/statements/control.js';
import { channelFor } from '../db/identifiers.js';
import { encodeControl } from '../notify/codec.js';

/** How long a probe's notification may take to arrive before LISTEN is taken for deaf. */
export const PROBE_WAIT_MS = 10_000;

/**
 * A worker's check, once LISTEN is first in place, that its LISTEN connection
 * hears a notification its pool sends. Behind a transaction-mode pooler (PgBouncer)
 * LISTEN is accepted and hears nothing: the worker fell back to polling, 2 s of
 * pick-up latency, without a word (outside reviews 129, 131). A probe that went out
 * and was not heard within PROBE_WAIT_MS calls `deaf`; a probe that could not be
 * sent, or a LISTEN lost meanwhile, says nothing (the errors say enough).
 */
export class ListenProbe {
  private pending: { id: string; timer: NodeJS.Timeout; sentAt: number } | undefined;
  private done = false;

  constructor(
    private readonly db: Queryable,
    private readonly schema: string,
    private readonly deaf: () => void,
    private readonly heardAfter: (ms: number) => void,
    private readonly waitMs = PROBE_WAIT_MS,
  ) {}

  /** Sends the probe, the first time LISTEN is in place; later calls do nothing. */
  start(): void {
    if (this.done) return;
    this.done = true;
    const id = randomBytes(8).toString('hex');
    const timer = setTimeout(() => {
      if (this.pending?.id !== id) return;
      this.pending = undefined;
      this.deaf();
    }, this.waitMs);
    timer.unref();
    this.pending = { id, timer, sentAt: performance.now() };
    const message = encodeControl({ c: 'probe', id });
    this.db.query(controlStatements(this.schema).probeListen, [channelFor(this.schema), message]).catch(() => this.cancel());
  }

  /** A probe arrived on LISTEN: heard, if it is this worker's. */
  heard(id: string): void {
    if (this.pending?.id !== id) return;
    const ms = performance.now() - this.pending.sentAt;
    this.cancel();
    this.heardAfter(ms);
  }

  /** LISTEN was lost, or the worker stops: no verdict. */
  cancel(): void {
    if (this.pending) clearTimeout(this.pending.timer);
    this.pending = undefined;
  }
}
