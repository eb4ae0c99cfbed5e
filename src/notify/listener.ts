import { EventEmitter } from 'node:events';
import type { Driver, Listening } from '../db/driver.js';
import { Backoff } from '../lifecycle/backoff.js';
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
const MAX_RETRY_MS = 10_000;

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
  private retryTimer: NodeJS.Timeout | undefined;
  private checkTimer: NodeJS.Timeout | undefined;
  private readonly retry = new Backoff({ minMs: MIN_RETRY_MS, maxMs: MAX_RETRY_MS });

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
    void this.open();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.retryTimer);
    clearInterval(this.checkTimer);
    const held = this.held;
    this.held = undefined;
    await held?.close();
  }

  private async open(): Promise<void> {
    if (this.stopped) return;
    let held: Listening | undefined;
    try {
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
      this.retry.reset();
      this.watch(held);
      this.emit('listening');
    } catch (err) {
      this.reconnect(err as Error);
    }
  }

  /**
   * A connection that stopped carrying packets without being closed delivers no
   * notification and reports nothing: a round trip now and then finds it out, and
   * a check that goes unanswered drops it (lost() then reconnects).
   */
  private watch(held: Listening): void {
    clearInterval(this.checkTimer);
    if (this.checkIntervalMs <= 0) return;
    this.checkTimer = setInterval(() => {
      if (this.held === held) void held.check(this.checkIntervalMs).catch(() => {});
    }, this.checkIntervalMs);
    this.checkTimer.unref();
  }

  private lost(held: Listening | undefined, err: Error): void {
    if (!held || this.held !== held) return;
    this.held = undefined;
    clearInterval(this.checkTimer);
    this.reconnect(err);
  }

  private reconnect(err: Error): void {
    if (this.stopped) return;
    this.emit('connectionError', err);
    this.retryTimer = setTimeout(() => void this.open(), this.retry.next());
    this.retryTimer.unref();
  }
}
