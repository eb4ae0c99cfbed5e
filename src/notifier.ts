import { EventEmitter } from 'node:events';
import pg from 'pg';
import { quoteIdent } from './db/identifiers.js';

/** A wake-up hint from the insert trigger: a queue got jobs due at `runAt` (ms since epoch). */
export interface WakeHint {
  queue: string;
  runAt: number;
}

/** A connection the notifier holds for as long as it lives. */
export interface HeldConnection {
  client: pg.ClientBase;
  /** Give the connection back (or destroy it when `err` is set). */
  release(err?: Error): void;
}

/**
 * A control message (src/db/control-queries.ts): `cancel` names a job to abort
 * wherever it runs; `queues` means the queues table changed (pause, limits).
 */
export type ControlMessage = { c: 'cancel'; id: string } | { c: 'queues' };

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

/**
 * A connection to hold for LISTEN: a dedicated client when there is a URL (so it
 * never takes a slot of the pool that runs statements), otherwise one borrowed
 * from the pool for as long as the notifier lives.
 */
export async function openListenConnection(connectionString: string | undefined, pool: pg.Pool | undefined): Promise<HeldConnection> {
  if (connectionString) {
    const client = new pg.Client({ connectionString, application_name: 'sluice-listen' });
    client.on('error', () => {});
    await client.connect();
    return { client, release: () => void client.end().catch(() => {}) };
  }
  const client = await pool!.connect();
  return { client, release: (err) => client.release(err ?? true) };
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
  private held: HeldConnection | undefined;
  private stopped = false;
  private retryTimer: NodeJS.Timeout | undefined;
  private failures = 0;

  constructor(
    private readonly connect: () => Promise<HeldConnection>,
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
    if (!held) return;
    held.client.removeAllListeners('notification');
    try {
      await held.client.query(`UNLISTEN ${quoteIdent(this.channel)}`);
      held.release();
    } catch (err) {
      held.release(err as Error);
    }
  }

  private async open(): Promise<void> {
    if (this.stopped) return;
    let held: HeldConnection | undefined;
    try {
      held = await this.connect();
      const { client } = held;
      client.on('notification', (msg) => {
        if (msg.channel !== this.channel) return;
        if (this.listenerCount('payload') > 0) this.emit('payload', msg.payload ?? '');
        if (this.listenerCount('wake') === 0 && this.listenerCount('control') === 0) return;
        const parsed = parseMessage(msg.payload);
        if ('c' in parsed) this.emit('control', parsed);
        else this.emit('wake', parsed);
      });
      client.on('error', (err) => this.lost(held!, err));
      client.on('end', () => this.lost(held!, new Error('LISTEN connection ended')));
      await client.query(`LISTEN ${quoteIdent(this.channel)}`);
      if (this.stopped) {
        held.release();
        return;
      }
      this.held = held;
      this.failures = 0;
      this.emit('listening');
    } catch (err) {
      held?.release(err as Error);
      this.retry(err as Error);
    }
  }

  private lost(held: HeldConnection, err: Error): void {
    if (this.held !== held) return;
    this.held = undefined;
    held.client.removeAllListeners('notification');
    held.release(err);
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

/** Wake-up hints (no `c` field) and control messages share the schema's channel. */
function parseMessage(payload: string | undefined): WakeHint | ControlMessage {
  try {
    const parsed = JSON.parse(payload ?? '') as { q?: unknown; t?: unknown; c?: unknown; id?: unknown };
    if (parsed.c === 'cancel') return { c: 'cancel', id: String(parsed.id) };
    if (parsed.c === 'queues') return { c: 'queues' };
    return { queue: String(parsed.q ?? ''), runAt: Number(parsed.t ?? 0) };
  } catch {
    // A hand-written NOTIFY on our channel: treat it as "something may be due".
    return { queue: '', runAt: 0 };
  }
}
