import type { ServerResponse } from 'node:http';
import { isConnectionFailure } from '../errors.js';
import type { WakeHint } from '../notify/codec.js';
import type { Notifier } from '../notify/listener.js';

/** How long notifications are gathered into one `jobs` event: a burst of enqueues makes one. */
const COALESCE_MS = 150;
/**
 * The overview costs a pass over the jobs table; under a stream of enqueues
 * (a NOTIFY each) it is re-read at most this often.
 */
const MIN_REFRESH_GAP_MS = 1000;
/**
 * ... and, after a read that took t, not before REREAD_GAP_IN_READS times t has passed
 * since it ended: on a large, busy table a read took 1.4-3.9 s, and re-reads
 * 1 s after each one began kept one running all the time, whatever refreshMs
 * was (outside review 255). So a notification keeps the overview's share of a
 * backend's time under a fifth.
 */
const REREAD_GAP_IN_READS = 4;
/** A comment line now and then keeps proxies from closing an idle stream. */
const KEEPALIVE_MS = 20_000;
/**
 * A browser with this much of its stream unsent is not reading it: its stream
 * is cut (an EventSource connects again by itself and gets the current overview).
 * Kept, every frame for it stayed in this process's memory (outside review 125:
 * 200 streams that never read took the dashboard from 77 MB to 1.86 GB).
 */
export const MAX_UNSENT_BYTES = 8 * 1024 * 1024;
/**
 * Unsent bytes of all streams together: past it the streams furthest behind are
 * cut until it holds. Per stream alone, 256 streams of a large overview still
 * held 1.4 GB (outside review 127).
 */
export const MAX_TOTAL_UNSENT_BYTES = 64 * 1024 * 1024;
/** Live streams one dashboard process serves at once; more are refused with a 503 (the page falls back to polling). */
export const MAX_STREAMS = 256;

export interface LiveFeedOptions {
  /** Reads what every browser shows on the overview (one query per refresh for all browsers). */
  load: () => Promise<unknown>;
  /** The one LISTEN connection of this dashboard process. */
  notifier: Notifier;
  /** While anyone watches, re-read this often to catch changes no NOTIFY announces. */
  refreshMs: number;
  /** Database trouble while refreshing; the feed keeps going. */
  onError: (err: unknown) => void;
}

/**
 * Server-sent events for every open browser tab, fed by one LISTEN connection
 * and one refresh loop per dashboard process, whatever the number of browsers.
 *
 * Postgres announces inserts (the jobs trigger NOTIFYs `sluice:<schema>`), so a
 * new job shows up at once. Completions and failures are not announced: a
 * NOTIFY per finished job would cost the hot path, so the feed re-reads the
 * overview every `refreshMs` while someone watches and pushes it only when it
 * changed. Browsers whose stream breaks fall back to polling on their own.
 *
 * Events: `overview` (the new overview, JSON), `jobs` (`{"queue": ...}`: jobs
 * were added or changed; a job list on screen should reload) and `status`
 * (DatabaseStatus: whether the last refresh reached the database; sent on
 * every change and to each newcomer). An open stream only says this server is
 * up: without `status`, a page would show "live" while every read fails.
 */
export class LiveFeed {
  private database: DatabaseStatus = { database: 'ok', since: new Date().toISOString() };
  private readonly clients = new Set<ServerResponse>();
  private refreshTimer: NodeJS.Timeout | undefined;
  private keepaliveTimer: NodeJS.Timeout | undefined;
  private coalesceTimer: NodeJS.Timeout | undefined;
  private gapTimer: NodeJS.Timeout | undefined;
  private lastRefreshAt = 0;
  /** When the last read ended (it began at lastRefreshAt: no read starts while refreshSoon waits). */
  private lastReadEndAt = 0;
  /** A re-read waits for the read in flight to end (see refreshSoon). */
  private afterRead = false;
  private pendingQueues = new Set<string>();
  private last = '';
  private listening = false;
  private refreshing: Promise<void> | undefined;
  private closed = false;
  /** The LISTEN connection's last error, told once until it listens again. */
  private listenError: string | undefined;

  constructor(private readonly options: LiveFeedOptions) {
    options.notifier.on('wake', (hint: WakeHint) => this.changed(hint.queue));
    // After a reconnect, notifications sent meanwhile are lost: refresh now.
    options.notifier.on('listening', () => {
      this.listenError = undefined;
      // LISTEN took: Postgres answers. A read still out on a connection the outage
      // silenced holds the next refresh until its 30 s bound: the page said
      // "unreachable" that long after the database came back (outside review 277).
      if (this.database.database === 'unreachable') this.setDatabase({ database: 'ok' });
      this.changed('');
    });
    // Once per outage and cause: a listen URL whose login fails was told about once a
    // second for as long as the dashboard ran (outside review 231).
    options.notifier.on('connectionError', (err) => {
      // The LISTEN connection checked silent, lost or refused: the database is out of reach
      // now, where a refresh waiting on a silent network learns it only at its 30 s bound,
      // and the page said "live" that long (outside review 277).
      if (isConnectionFailure(err)) this.setDatabase(describeFailure(err));
      const said = err instanceof Error ? err.message : String(err);
      if (said === this.listenError) return;
      this.listenError = said;
      options.onError(err);
    });
  }

  get watchers(): number {
    return this.clients.size;
  }

  /** What the last refresh found: the database reached, unreachable, or answering with an error. */
  get status(): DatabaseStatus {
    return this.database;
  }

  /** Streams events to one browser until it goes away. */
  attach(res: ServerResponse): void {
    if (this.closed) {
      res.end();
      return;
    }
    if (this.clients.size >= MAX_STREAMS) {
      res.writeHead(503, { 'content-type': 'text/plain; charset=utf-8', 'retry-after': '10' });
      res.end(`this dashboard serves ${MAX_STREAMS} live streams at most\n`);
      return;
    }
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-store',
      connection: 'keep-alive',
      // Tell nginx-style proxies not to buffer the stream.
      'x-accel-buffering': 'no',
    });
    res.write('retry: 3000\n\n');
    this.clients.add(res);
    res.write(frame('status', JSON.stringify(this.database)));
    res.on('close', () => {
      this.clients.delete(res);
      if (this.clients.size === 0) this.idle();
    });
    this.start();
    // The newcomer gets the current overview even if it did not change: the last
    // one read, while it is fresh. A read per newcomer made a restart that
    // reconnected many tabs cost as many passes over the jobs table (outside review 125).
    if (this.last !== '' && Date.now() - this.lastRefreshAt < this.options.refreshMs) this.sendTo(res, this.last);
    else void this.refresh(res);
  }

  /** Something changed (an action from this dashboard, or a notification): refresh soon. */
  changed(queue: string): void {
    if (this.clients.size === 0 || this.closed) return;
    this.pendingQueues.add(queue);
    if (this.coalesceTimer) return;
    this.coalesceTimer = setTimeout(() => {
      this.coalesceTimer = undefined;
      const queues = [...this.pendingQueues];
      this.pendingQueues.clear();
      for (const q of queues) this.broadcast('jobs', JSON.stringify({ queue: q }));
      this.refreshSoon();
    }, COALESCE_MS);
  }

  private refreshSoon(): void {
    if (this.gapTimer || this.afterRead || this.clients.size === 0 || this.closed) return;
    if (this.refreshing) {
      // A read that began before this change may not show it: the next one follows it.
      this.afterRead = true;
      void this.refreshing.then(() => {
        this.afterRead = false;
        this.refreshSoon();
      });
      return;
    }
    const notBefore = Math.max(
      this.lastRefreshAt + MIN_REFRESH_GAP_MS,
      this.lastReadEndAt + REREAD_GAP_IN_READS * (this.lastReadEndAt - this.lastRefreshAt),
    );
    const wait = notBefore - Date.now();
    if (wait <= 0) {
      void this.refresh();
      return;
    }
    this.gapTimer = setTimeout(() => {
      this.gapTimer = undefined;
      void this.refresh();
    }, wait);
  }

  async close(): Promise<void> {
    this.closed = true;
    this.idle();
    for (const res of this.clients) res.end();
    this.clients.clear();
    if (this.listening) {
      this.listening = false;
      await this.options.notifier.stop();
    }
    await this.refreshing;
  }

  private start(): void {
    if (!this.listening) {
      this.listening = true;
      this.options.notifier.start();
    }
    this.refreshTimer ??= setInterval(() => void this.refresh(), this.options.refreshMs);
    this.keepaliveTimer ??= setInterval(() => this.write(': keepalive\n\n'), KEEPALIVE_MS);
  }

  /** Nobody watches: stop querying. The LISTEN connection stays, so the next browser is served at once. */
  private idle(): void {
    clearInterval(this.refreshTimer);
    clearInterval(this.keepaliveTimer);
    clearTimeout(this.coalesceTimer);
    clearTimeout(this.gapTimer);
    this.refreshTimer = this.keepaliveTimer = this.coalesceTimer = this.gapTimer = undefined;
    this.last = '';
  }

  /** Loads the overview (never two loads at a time); sends it to all if it changed, else to `only`. */
  private refresh(only?: ServerResponse): Promise<void> {
    // One read in flight serves the newcomers that arrive meanwhile too.
    if (this.refreshing) return this.refreshing.then(() => void (only && this.last !== '' && this.sendTo(only, this.last)));
    this.refreshing = (async () => {
      this.lastRefreshAt = Date.now();
      try {
        const data = JSON.stringify(await this.options.load());
        this.setDatabase({ database: 'ok' });
        if (data !== this.last) {
          this.last = data;
          this.broadcast('overview', data);
        } else if (only) {
          this.sendTo(only, data);
        }
      } catch (err) {
        this.setDatabase(describeFailure(err));
        this.options.onError(err);
      } finally {
        this.refreshing = undefined;
        this.lastReadEndAt = Date.now();
      }
    })();
    return this.refreshing;
  }

  /**
   * What a read outside the feed found (api/status): kept as the feed's own
   * finding, so that both say the same state and the same `since`.
   */
  observe(next: Omit<DatabaseStatus, 'since'>): DatabaseStatus {
    this.setDatabase(next);
    return this.database;
  }

  /** `since` moves only when the state (ok / unreachable / error) changes; a new message keeps it. */
  private setDatabase(next: Omit<DatabaseStatus, 'since'>): void {
    const sameState = next.database === this.database.database;
    if (sameState && next.message === this.database.message) return;
    this.database = { ...next, since: sameState ? this.database.since : new Date().toISOString() };
    // A recovered database may have changed anything meanwhile: the next overview goes to all.
    if (!sameState && next.database === 'ok') this.last = '';
    this.broadcast('status', JSON.stringify(this.database));
  }

  private broadcast(event: string, data: string): void {
    this.write(frame(event, data));
  }

  private write(text: string): void {
    for (const res of this.clients) res.write(text);
    this.shed();
  }

  /** The overview to one newcomer, counted against the unsent limits as any write. */
  private sendTo(res: ServerResponse, overview: string): void {
    if (!this.clients.has(res)) return;
    res.write(frame('overview', overview));
    this.shed();
  }

  /** Cuts the streams that are not read: one too far behind, then the furthest behind while all together are. */
  private shed(): void {
    let total = 0;
    for (const res of this.clients) {
      if (res.writableLength > MAX_UNSENT_BYTES) this.cut(res);
      else total += res.writableLength;
    }
    if (total <= MAX_TOTAL_UNSENT_BYTES) return;
    for (const res of [...this.clients].sort((a, b) => b.writableLength - a.writableLength)) {
      if (total <= MAX_TOTAL_UNSENT_BYTES) break;
      total -= res.writableLength;
      this.cut(res);
    }
  }

  private cut(res: ServerResponse): void {
    this.clients.delete(res);
    res.destroy();
  }
}

/** Whether the dashboard reaches its database, as the page's header shows it. */
export interface DatabaseStatus {
  /** 'unreachable': no connection (the feed keeps retrying); 'error': connected, but the reads fail. */
  database: 'ok' | 'unreachable' | 'error';
  /** What went wrong, for the page to show. */
  message?: string;
  /** ISO time this state (ok / unreachable / error) began, as this dashboard process saw it; the same while it lasts. */
  since: string;
}

/** A failed read as a status: no connection at all, or an error from a database that answers. */
export function describeFailure(err: unknown): Omit<DatabaseStatus, 'since'> {
  const message = err instanceof Error ? err.message : String(err);
  return { database: isConnectionFailure(err) ? 'unreachable' : 'error', message };
}

function frame(event: string, data: string): string {
  return `event: ${event}\ndata: ${data}\n\n`;
}
