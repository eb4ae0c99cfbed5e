import { EventEmitter } from 'node:events';
import type { Driver, Listening } from '../db/driver.js';
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
  private failures = 0;

  constructor(
    private readonly driver: Driver,
    private readonly channel: string,
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
      this.failures = 0;
      this.emit('listening');
    } catch (err) {
      this.retry(err as Error);
    }
  }

  private lost(held: Listening | undefined, err: Error): void {
    if (!held || this.held !== held) return;
    this.held = undefined;
    this.retry(err);
  }

  private retry(err: Error): void {
    if (this.stopped) return;
    this.emit('connectionError', err);
    const delay = Math.min(MAX_RETRY_MS, MIN_RETRY_MS * 2 ** this.failures++);
    this.retryTimer = setTimeout(() => void this.open(), delay * (0.5 + Math.random() / 2));
    this.retryTimer.unref();
  }
}
