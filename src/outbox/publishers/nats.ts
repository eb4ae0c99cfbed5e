import type * as Nats from 'nats';
import { timeLimit } from '../../lifecycle/time-limit.js';
import { importPeer } from '../../optional-peer.js';
import { headersProblem, natsReservedHeader } from '../message.js';
import { ConfigError } from '../../errors.js';
import {
  allFailed,
  asError,
  CLOSE_TIMEOUT_MS,
  openedBy,
  publisherOptions,
  mayPublish,
  notHeld,
  unreachable,
  type BrokerPublisher,
  type PublishBatchOptions,
  type PublishResult,
  type RelayMessage,
} from './publisher.js';

export interface NatsPublisherOptions {
  /** NATS server URL(s). Default 'nats://127.0.0.1:4222'. */
  servers?: string | string[];
  /** Prepended to each destination to make the subject. Default ''. */
  subjectPrefix?: string;
  /** How long one publish waits for JetStream's ack, in ms. Default 5000. */
  ackTimeoutMs?: number;
  /** Any other nats.js connect() options (user, pass, token, tls, ...). */
  connectOptions?: Record<string, unknown>;
  /** The header that carries the message's key (null: none). Default 'Sluice-Key'. */
  keyHeader?: string | null;
}

// These mean the broker or the path to it is not there now, not that it refused
// this message: 503 is "no responders" (JetStream down, or no stream listens on
// the subject yet), 408 a JetStream request timeout; the E* codes are Node's
// socket errors (outside review 98: ECONNRESET counted as a refusal, and messages
// the broker never saw became dead letters).
const TRANSIENT_CODES = new Set([
  'ECONNRESET',
  'ECONNREFUSED',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  'TIMEOUT',
  '503',
  '408',
  'CONNECTION_CLOSED',
  'CONNECTION_DRAINING',
  'CONNECTION_REFUSED',
  'CONNECTION_TIMEOUT',
  'DISCONNECT',
  'CANCELLED',
  'REQUEST_ERROR',
]);

/** Messages sent between two turns of the event loop (see publish). */
const PUBLISH_SLICE = 1_000;

/** Whether a nats.js error says "try again later" rather than "this message is refused". */
export function isTransientNatsError(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code !== 'string' || TRANSIENT_CODES.has(code);
}

/**
 * Why `subject` cannot be published to, or undefined when it can: empty tokens
 * (`a..b`), white space, or a wildcard token. JetStream never stores such a
 * message and nats.js does not refuse it: it timed out or got 503 on every try,
 * counted as transient, so it blocked its destination for ever (review 46), or,
 * for a wildcard, reached subscribers as a literal subject.
 */
export function badSubject(subject: string): string | undefined {
  if (/[\s\p{Cc}]/u.test(subject)) return 'it contains white space or a control character';
  const tokens = subject.split('.');
  if (tokens.some((t) => t === '')) return 'it has an empty token (a leading, trailing or doubled ".")';
  if (tokens.some((t) => t === '*' || t === '>')) return 'it has a wildcard token ("*" or ">")';
  return undefined;
}

/**
 * JetStream's own answer to a publish, carried as `api_error`: taken for "no
 * responders" (a 503), a full stream was said to capture nothing (outside review
 * 186). A refusal of this message (too large) counts as a try; a stream out of
 * room (maximum messages or bytes, discard new) is the stream's state, not the
 * message's fault: waiting, said in the broker's words, as for an outage (review
 * 189: counted, the backlog became dead letters one by one, none of them bad).
 * Undefined for other errors, such as a cluster with no leader.
 */
function streamAnswer(err: unknown): PublishResult | undefined {
  const api = (err as { api_error?: { description?: unknown; err_code?: unknown } } | null)?.api_error;
  if (!api || typeof api.description !== 'string') return undefined;
  const error = new Error(`JetStream refused the message: ${api.description} (err_code ${String(api.err_code)})`, { cause: err });
  if (/maximum (messages|bytes)|insufficient resources/i.test(api.description)) return { ok: false, error, transient: true };
  if (/exceed|too large|maximum/i.test(api.description)) return { ok: false, error, transient: false };
  return undefined;
}

/** nats.js says only "503": name the subject and what it means here. */
function explained(err: unknown, subject: string): Error {
  const error = asError(err);
  if ((err as { code?: unknown } | null)?.code !== '503') return error;
  return new Error(`no JetStream stream captures subject "${subject}", or JetStream is not running (503, no responders)`, {
    cause: error,
  });
}

interface Connected {
  nc: Nats.NatsConnection;
  js: Nats.JetStreamClient;
  headers: typeof Nats.headers;
}

/**
 * Publishes to NATS JetStream with the `nats` package (an optional peer:
 * `npm install nats`). Every message of a batch is sent at once on one
 * connection (so the stream stores them in order) with its message id as
 * `Nats-Msg-Id`, and the batch resolves when JetStream has acked them all. A
 * stream must capture the subjects; its duplicate_window is how long a
 * re-publish after a relay crash is dropped as a duplicate.
 *
 * @example
 *   const relay = new OutboxRelay({ connectionString, destinations: ['orders.paid'],
 *     publisher: natsPublisher({ servers: 'nats://127.0.0.1:4222' }) });
 */
export function natsPublisher(options: NatsPublisherOptions = {}): BrokerPublisher {
  const timeout = publisherOptions('natsPublisher', options, ['subjectPrefix'], { name: 'ackTimeoutMs', default: 5_000 }, [
    'servers',
    'connectOptions',
  ]);
  const servers = options.servers;
  if (
    servers !== undefined &&
    !(typeof servers === 'string' && servers.trim() !== '') &&
    !(Array.isArray(servers) && servers.length > 0 && servers.every((x) => typeof x === 'string' && x.trim() !== ''))
  ) {
    throw new ConfigError('natsPublisher: servers must be a URL or an array of URLs');
  }
  for (const server of servers === undefined ? [] : [servers].flat()) {
    const bad = badServer(server);
    if (bad) throw new ConfigError(`natsPublisher: servers: ${JSON.stringify(server)} ${bad}`);
  }
  // tls:// asks for TLS: nats.js took it as a plain URL and connected in clear to a
  // server without TLS (outside review 247).
  const tls = [servers ?? []].flat().some((server) => /^tls:\/\//i.test(server.trim())) ? { tls: {} } : {};
  const prefix = options.subjectPrefix ?? '';
  const keyHeader = options.keyHeader === undefined ? 'Sluice-Key' : options.keyHeader;
  let connecting: Promise<Connected> | undefined;

  const load = () => importPeer<typeof import('nats')>('nats', 'The NATS relay');
  const connect = (): Promise<Connected> =>
    (connecting ??= (async () => {
      const nats = await load();
      const nc = await nats.connect({
        servers: options.servers ?? 'nats://127.0.0.1:4222',
        name: 'sluice-relay',
        // Keep reconnecting for ever: the relay's own backoff decides when to retry.
        maxReconnectAttempts: -1,
        reconnectTimeWait: 250,
        // Opening a connection into a blackhole gives up, rather than hang.
        timeout: timeout,
        // A silent connection is found by unanswered PINGs (nats.js' default takes
        // 4 minutes): ~10-15 s here, then nats.js reconnects by itself.
        pingInterval: 5_000,
        maxPingOut: 2,
        ...tls,
        ...options.connectOptions,
      });
      // A connection closed for good is replaced on the next batch.
      void nc.closed().then(() => {
        connecting = undefined;
      });
      return { nc, js: nc.jetstream({ timeout }), headers: nats.headers };
    })().catch((err: unknown) => {
      connecting = undefined;
      throw err;
    }));

  return {
    name: 'nats',
    async prepare(): Promise<void> {
      await load();
    },
    async inspect(destination: string, leaseMs: number): Promise<string | undefined> {
      const { nc } = await connect();
      const jsm = await nc.jetstreamManager();
      const subject = prefix + destination;
      const stream = await jsm.streams.find(subject);
      const windowMs = Number((await jsm.streams.info(stream)).config.duplicate_window) / 1e6;
      // A takeover comes within one and a half leases of the last renewal; the batch
      // the dead relay sent comes again then, and must still be inside the window.
      const neededMs = 2 * leaseMs;
      if (windowMs >= neededMs) return undefined;
      return (
        `stream ${stream} (subject ${subject}) drops duplicates for ${windowMs / 1000} s, under twice the ` +
        `relay's lease (${neededMs / 1000} s): a batch a relay published just before it died is stored twice ` +
        `when the relay taking its partitions over sends it again; raise the stream's duplicate_window (outside review 205)`
      );
    },
    refuses(destination: string): string | undefined {
      const bad = badSubject(prefix + destination);
      return bad && `"${prefix + destination}" is not a NATS subject: ${bad}`;
    },
    async publish(messages: readonly RelayMessage[], batch?: PublishBatchOptions): Promise<PublishResult[]> {
      let c: Connected;
      try {
        c = await connect();
      } catch (err) {
        // Whatever stops a connect (a refusal, a reset, bad credentials) is no message's fault.
        const said =
          (err as { code?: unknown }).code === 'SERVER_OPT_NA' && /tls/i.test(asError(err).message) ? withoutTls(err) : err;
        return allFailed(messages.length, unreachable('NATS', said, options.servers ?? 'nats://127.0.0.1:4222'));
      }
      const publishOne = (m: RelayMessage): Promise<PublishResult> => {
        const subject = prefix + m.destination;
        const bad = badSubject(subject);
        // Refused, so it counts as a try and ends in the dead letters.
        if (bad) {
          const error = new Error(`"${subject}" is not a NATS subject to publish to: ${bad}`);
          return Promise.resolve<PublishResult>({ ok: false, error, transient: false, unsendable: true });
        }
        let h: Nats.MsgHdrs | undefined;
        try {
          h = natsHeaders(c, m, keyHeader);
        } catch (err) {
          // Headers NATS cannot carry (a line break, a space in a name, a value that is
          // no string: rows written past publish()) are this message's fault: a dead
          // letter at once, instead of failing the batch for ever.
          const error = new Error(`message ${m.id}: NATS cannot carry its headers or key: ${asError(err).message}`);
          return Promise.resolve<PublishResult>({ ok: false, error, transient: false, unsendable: true });
        }
        return c.js.publish(subject, m.payload, { msgID: m.messageId, headers: h, timeout }).then(
          (ack): PublishResult => ({ ok: true, duplicate: ack.duplicate }),
          (err: unknown): PublishResult => {
            const answer = streamAnswer(err);
            if (answer) return answer;
            return { ok: false, error: explained(err, subject), transient: isTransientNatsError(err) };
          },
        );
      };
      const sent: Promise<PublishResult>[] = [];
      for (const m of messages) {
        // Sent in slices, the event loop let through between them: 100,000 at once
        // held it ~30 s, every ack's timer ran out before its ack was read, and the
        // batch was sent again and again, never recorded (outside review 186).
        if (sent.length > 0 && sent.length % PUBLISH_SLICE === 0) await new Promise((resolve) => setImmediate(resolve));
        sent.push(mayPublish(batch) ? publishOne(m) : Promise.resolve(notHeld()));
      }
      const results = await Promise.all(sent);
      // Acks that time out while the connection still looks open: it may have gone
      // silent (a blackhole sends no error), and nats.js would keep it until its
      // PINGs go unanswered. The next batch goes out on a fresh one (review 48).
      if (results.some((r) => !r.ok && (r.error as { code?: unknown }).code === 'TIMEOUT') && !c.nc.isClosed()) {
        c.nc.reconnect().catch(() => {});
      }
      return results;
    },
    async close(): Promise<void> {
      const deadline = Date.now() + CLOSE_TIMEOUT_MS;
      const pending = connecting;
      connecting = undefined;
      const c = await openedBy(pending, deadline, (late) => void late.nc.close().catch(() => {}));
      if (!c) return;
      // Bounded: a drain over a silent connection would wait for ever.
      const drained = c.nc.drain();
      const left = Math.max(0, deadline - Date.now());
      await timeLimit(drained, left, () => void c.nc.close().catch(() => {}), 'draining', { from: 'NATS' }).catch(() =>
        c.nc.close().catch(() => {}),
      );
    },
  };
}

/**
 * Why a server URL can never be connected to, or undefined. An unparseable one
 * (`http://[bad`, a port that is no number) was tried as an outage, for ever, and
 * its relay kept its partitions from relays that could publish (outside review
 * 247). A host that does not resolve is left to retries: DNS may answer later.
 */
export function badServer(server: string): string | undefined {
  const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(server.trim())?.[1]?.toLowerCase();
  if (scheme !== undefined && scheme !== 'nats' && scheme !== 'tls')
    return `is not a NATS URL: the scheme must be nats:// or tls://`;
  let url: URL;
  try {
    url = new URL(`nats://${server.trim().replace(/^[a-z]+:\/\//i, '')}`);
  } catch {
    return 'is not a URL';
  }
  if (url.hostname === '') return 'is not a NATS URL: it names no host';
  // Never reachable, or silently dropped by nats.js (outside review 248).
  if (url.port === '0') return 'is not a NATS URL: port 0 is no port to connect to';
  if ((url.pathname !== '' && url.pathname !== '/') || url.search !== '' || url.hash !== '') {
    return 'is not a NATS URL: it has a path, query or fragment, which NATS does not use';
  }
  return undefined;
}

/** nats.js says only "tls" when the server offers no TLS and the client asked for it (a tls:// URL). */
function withoutTls(err: unknown): Error {
  return new Error('the server offers no TLS, and a tls:// URL (or connectOptions.tls) asks for it', { cause: err });
}

/** The NATS headers of a message: its own and its key's; undefined when it has none. Throws what NATS refuses. */
function natsHeaders(c: Connected, m: RelayMessage, keyHeader: string | null): Nats.MsgHdrs | undefined {
  if (!m.headers && (!keyHeader || m.key === null)) return undefined;
  // Rows written past publish(): checked before nats.js, whose headers take time quadratic in their count.
  const problem = m.headers && headersProblem(m.headers);
  if (problem) throw new Error(problem);
  const h = c.headers();
  for (const [name, value] of Object.entries(m.headers ?? {})) {
    // Rows written past publish(): Nats-Rollup would purge the subject (review 64).
    if (natsReservedHeader(name)) throw new Error(`header ${name} is reserved (Nats-* headers are JetStream's controls)`);
    if (typeof value !== 'string') throw new Error(`header ${name} is not a string`);
    h.set(name, value);
  }
  if (keyHeader && m.key !== null) h.set(keyHeader, m.key);
  return h;
}
