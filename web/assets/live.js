// Live updates: one EventSource to api/events. When the stream cannot be kept
// (a proxy that buffers, a server restart) the page polls instead, and tries
// the stream again later. An open stream only proves the dashboard server is
// up: the server's `status` events (and, while polling, api/status) say whether
// it reaches the database.

const POLL_MS = 5000;
const RETRY_STREAM_MS = 30_000;

/**
 * @typedef {{ database: 'ok' | 'unreachable' | 'error', message?: string, since?: string }} DatabaseStatus
 * @param {{
 *   onOverview: (o: any) => void,
 *   onJobs: (e: { queue: string }) => void,
 *   onState: (s: 'live' | 'polling' | 'offline') => void,
 *   onDatabase: (s: DatabaseStatus) => void,
 *   poll: () => Promise<any>,
 *   status: () => Promise<DatabaseStatus>,
 * }} handlers
 */
export function startLive(handlers) {
  /** @type {EventSource | undefined} */
  let source;
  /** @type {ReturnType<typeof setInterval> | undefined} */
  let pollTimer;
  let failures = 0;

  const poll = async () => {
    try {
      handlers.onOverview(await handlers.poll());
      handlers.onJobs({ queue: '' });
      handlers.onState('polling');
      handlers.onDatabase({ database: 'ok' });
    } catch {
      // Which one is down: the dashboard server, or only its database?
      try {
        handlers.onDatabase(await handlers.status());
        handlers.onState('polling');
      } catch {
        handlers.onState('offline');
      }
    }
  };

  const startPolling = () => {
    if (pollTimer) return;
    void poll();
    pollTimer = setInterval(poll, POLL_MS);
    setTimeout(openStream, RETRY_STREAM_MS);
  };

  const openStream = () => {
    source?.close();
    source = new EventSource('api/events');
    source.addEventListener('open', () => {
      failures = 0;
      clearInterval(pollTimer);
      pollTimer = undefined;
      handlers.onState('live');
    });
    source.addEventListener('overview', (e) => handlers.onOverview(JSON.parse(/** @type {MessageEvent} */ (e).data)));
    source.addEventListener('jobs', (e) => handlers.onJobs(JSON.parse(/** @type {MessageEvent} */ (e).data)));
    source.addEventListener('status', (e) => handlers.onDatabase(JSON.parse(/** @type {MessageEvent} */ (e).data)));
    source.addEventListener('error', () => {
      // EventSource reconnects by itself; after a few failures in a row, poll meanwhile.
      if (++failures >= 3 || source?.readyState === EventSource.CLOSED) {
        source?.close();
        startPolling();
      }
    });
  };

  if ('EventSource' in window) openStream();
  else startPolling();
}
