import { randomBytes } from 'node:crypto';
import { connect as tcpConnect } from 'node:net';
import { connect, DiscardPolicy, type JetStreamManager, type NatsConnection } from 'nats';
import { afterAll, beforeAll } from 'vitest';

export const NATS_URL = process.env.SLUICE_NATS_URL ?? 'nats://127.0.0.1:4222';
export const AMQP_URL = process.env.SLUICE_AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672';

/** Whether something accepts TCP connections at the URL's host and port (within 1 s). */
export function reachable(url: string): Promise<boolean> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = tcpConnect({ host: hostname, port: Number(port), timeout: 1000 });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
    socket.once('timeout', () => done(false));
  });
}

/**
 * Whether the broker tests of a file run: yes when the broker is reachable; when
 * it is not, they are skipped with the reason on stderr, unless
 * SLUICE_REQUIRE_BROKERS=1 (CI), where an unreachable broker fails the file.
 */
export async function brokerAvailable(name: string, url: string): Promise<boolean> {
  if (await reachable(url)) return true;
  const reason = `${name} is not reachable at ${url}`;
  if (process.env.SLUICE_REQUIRE_BROKERS === '1') throw new Error(`${reason} and SLUICE_REQUIRE_BROKERS=1`);
  process.stderr.write(`skipping the ${name} tests: ${reason} (set SLUICE_REQUIRE_BROKERS=1 to fail instead)\n`);
  return false;
}

/** A JetStream stream of its own for a test file, capturing `<prefix>.>`. */
/** Limits a test stream may set. */
export interface StreamLimits {
  max_msg_size?: number;
  max_msgs?: number;
  discard?: DiscardPolicy;
  /** In nanoseconds. */
  duplicate_window?: number;
}

export async function createStream(jsm: JetStreamManager, name: string, prefix: string, extra: StreamLimits = {}): Promise<void> {
  await jsm.streams.add({ name, subjects: [`${prefix}.>`], duplicate_window: 120_000_000_000, ...extra });
}

export interface StoredMessage {
  subject: string;
  payload: string;
  msgId: string | undefined;
  key: string | undefined;
}

/** Every message of a stream, in stream order. */
export async function readStream(nc: NatsConnection, stream: string): Promise<StoredMessage[]> {
  const jsm = await nc.jetstreamManager();
  const info = await jsm.streams.info(stream);
  const out: StoredMessage[] = [];
  for (let seq = info.state.first_seq; seq <= info.state.last_seq && info.state.messages > 0; seq++) {
    const m = await jsm.streams.getMessage(stream, { seq });
    out.push({
      subject: m.subject,
      payload: new TextDecoder().decode(m.data),
      msgId: m.header.get('Nats-Msg-Id') || undefined,
      key: m.header.get('Sluice-Key') || undefined,
    });
  }
  return out;
}

/** A JetStream stream of a test file's own, made before its tests and deleted after. */
export interface TestStream {
  /** The connection the stream was made on, for reading it back. */
  readonly nc: NatsConnection;
  readonly name: string;
  /** Subjects under `<prefix>.` land in the stream. */
  readonly prefix: string;
}

/** Registers beforeAll/afterAll hooks for a stream named after `label` and a random tag. */
export function useNatsStream(label: string, extra: StreamLimits = {}): TestStream {
  const tag = randomBytes(4).toString('hex');
  let nc: NatsConnection | undefined;
  const stream = {
    get nc(): NatsConnection {
      if (!nc) throw new Error('the stream is made in beforeAll');
      return nc;
    },
    name: `SLUICE_${label.toUpperCase()}_${tag}`,
    prefix: `sluice${label.toLowerCase()}${tag}`,
  };
  beforeAll(async () => {
    nc = await connect({ servers: NATS_URL });
    await createStream(await nc.jetstreamManager(), stream.name, stream.prefix, extra);
  });
  afterAll(async () => {
    await (await nc?.jetstreamManager())?.streams.delete(stream.name).catch(() => {});
    await nc?.close();
  });
  return stream;
}
