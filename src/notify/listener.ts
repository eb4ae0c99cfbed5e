import { EventEmitter } from 'node:events';
import type { Driver, Listening } from '../db/driver.js';
import { Loop } from '../lifecycle/loop.js';
import { decodeMessage, type ControlMessage, type WakeHint } from './codec.js';

// The messages this listener emits; their format is src/notify/codec.ts.
export type { ControlMessage, WakeHint };

export interface NotifierEvents {
  wake: [WakeHint];
  /** The raw payload of every notification on the channel (for channels that are not wake hints). */
  payload: [string];
  control: [ControlMessage];
  /** LISTEN is (again) in place. Notifications sent while it was down are lost: catch up now. */
  listening: [];
  /** The connection failed; the notifier retries on its own. */
  connectionError: [Error];
}

const MIN_RETRY_MS = 100;
// A reconnect costs one connection attempt; a long wait between them delayed the
// worker's catch-up claim (and its 'reconnected') by up to the cap after Postgres
// came back (10 s before).
const MAX_RETRY_MS = 2_000;

/**
 * One dedicated LISTEN connection per worker. When it drops (restart, network,
 * pg_terminate_backend) it reconnects with capped exponential backoff, LISTENs
 * again, and emits 'listening' so the worker claims whatever was enqueued while
 * no notification could reach it. NOTIFY is only a latency hint: the worker keeps
 * a slow poll for whatever this misses.
 */
export class Notifier extends EventEmitter<NotifierEvents> {
  private held: Listening | undefined;
  private stopped = false;
  /** Opens the connection; after a failure or a loss, again after a backoff. */
  private connect: Loop | undefined;
  /** Round trips on the open connection (when checkIntervalMs > 0). */
  private checks: Loop | undefined;

  constructor(
    private readonly driver: Driver,
    private readonly channel: string,
    /** How often the connection is checked with a round trip (and how long the check may take); 0: never. */
    private readonly checkIntervalMs = 0,
  ) {
    super();
  }

  start(): void {
    this.stopped = false;
    this.connect = new Loop({
      pass: () => this.open(),
      // An open connection is kept until it is lost (then lost() calls retry()).
      intervalMs: Infinity,
      backoff: { minMs: MIN_RETRY_MS, maxMs: MAX_RETRY_MS },
      onError: (err) => this.emit('connectionError', err as Error),
    });
    // Started, so that a failed attempt is followed by another after the backoff.
    this.connect.start();
    void this.connect.trigger();
    // A connection that stopped carrying packets without being closed delivers no
    // notification and reports nothing: a round trip now and then finds it out, and
    // a check that goes unanswered drops it (lost() then reconnects).
    const checkMs = this.checkIntervalMs;
    if (checkMs > 0) {
      this.checks = new Loop({ pass: () => this.held?.check(checkMs).catch(() => {}), intervalMs: checkMs });
      this.checks.start();
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    // Neither waits for its pass: a connection attempt to an unreachable server
    // lasts until its timeout (open() closes what it opens after stop), and a check
    // in flight ends with the connection, closed below.
    void this.connect?.stop();
    void this.checks?.stop();
    const held = this.held;
    this.held = undefined;
    await held?.close();
  }

  /**
   * One round trip on the LISTEN connection, which waits for no pool: rejects when
   * none is open or it does not answer within `timeoutMs` (then it is dropped, and
   * opened again).
   */
  async check(timeoutMs: number): Promise<void> {
    if (!this.held) throw new Error('no LISTEN connection is open');
    await this.held.check(timeoutMs);
  }

  private async open(): Promise<void> {
    if (this.stopped) return;
    // Declared first: the driver may report the connection lost before listen() resolves.
    let held: Listening | undefined = undefined;
    held = await this.driver.listen(this.channel, {
      notification: (payload) => {
        if (this.listenerCount('payload') > 0) this.emit('payload', payload ?? '');
        if (this.listenerCount('wake') === 0 && this.listenerCount('control') === 0) return;
        const parsed = decodeMessage(payload);
        if ('c' in parsed) this.emit('control', parsed);
        else this.emit('wake', parsed);
      },
      lost: (err) => this.lost(held, err),
    });
    if (this.stopped) {
      await held.close();
      return;
    }
    this.held = held;
    this.emit('listening');
  }

  private lost(held: Listening | undefined, err: Error): void {
    if (!held || this.held !== held) return;
    this.held = undefined;
    if (this.stopped) return;
    this.emit('connectionError', err);
    this.connect?.retry();
  }
}
