import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { describe, expect, it } from 'vitest';
import amqp from 'amqplib';
import { OutboxRelay, natsPublisher, rabbitMqPublisher, type BrokerPublisher } from '../src/index.js';
import { waitFor } from './helpers/database.js';
import { AMQP_URL, NATS_URL, brokerAvailable, readStream, useNatsStream } from './helpers/brokers.js';
import { relayMessage, useOutboxSchema } from './helpers/outbox.js';
import { startTcpProxy, type TcpProxy } from './helpers/tcp-proxy.js';

// A broker behind a network that goes silent (a blackhole: no error, no close).
// Outside review 48: the relay stalled with no error, and relay.stop() hung.

const natsUp = await brokerAvailable('NATS', NATS_URL);
const rabbitUp = await brokerAvailable('RabbitMQ', AMQP_URL);

const schema = useOutboxSchema('outbox_silent');
const tag = randomBytes(4).toString('hex');

/**
 * Messages go out; the relay's connection to the broker goes silent for good
 * while more are published: the relay reports transient failures (nothing is
 * counted against the messages), gives the connection up and gets every message
 * into the broker over a new one; then, with the whole network silent, stop()
 * still returns.
 */
async function ridesOutSilence(proxy: TcpProxy, publisher: BrokerPublisher, destination: string): Promise<void> {
  const relay = new OutboxRelay({ pool: schema.db.pool, schema: schema.db.schema, publisher, destinations: [destination] });
  let published = 0;
  const failures: { transient: boolean }[] = [];
  relay.events.on('published', (b) => (published += b.count));
  relay.events.on('failure', (f) => failures.push(f));
  await relay.start();
  try {
    await schema.outbox.publishMany(Array.from({ length: 10 }, (_, n) => ({ destination, payload: `before:${n}` })));
    await waitFor(() => published === 10, 'the first 10 in the broker');
    proxy.strand();
    await schema.outbox.publishMany(Array.from({ length: 10 }, (_, n) => ({ destination, payload: `during:${n}` })));
    await waitFor(() => failures.length > 0, 'the silent connection reported as a failure');
    expect(failures.every((f) => f.transient)).toBe(true);
    await waitFor(() => published === 20, 'the other 10 in the broker over a new connection', 60_000);
  } finally {
    proxy.cut();
    await relay.stop(); // must return though the broker cannot answer
    await proxy.close();
  }
  const { rows } = await schema.db.pool.query(`SELECT count(*)::int AS n FROM ${schema.db.s}.outbox_dead_letters`);
  expect(rows[0].n).toBe(0);
}

/**
 * stop() while a batch waits for acks that will not come: it gives the batch up
 * (published again by whichever relay goes on) rather than wait out the ack
 * timeout, here longer than the test's own timeout.
 */
async function stopsWithBatchInFlight(proxy: TcpProxy, broker: BrokerPublisher, destination: string): Promise<void> {
  let calls = 0;
  const publisher: BrokerPublisher = {
    name: broker.name,
    publish: (messages) => (calls++, broker.publish(messages)),
    close: () => broker.close(),
  };
  const timersBefore = timersHolding();
  // On a pool of its own, ended by stop(): the idle timers of a shared pool's clients would count.
  const { url: connectionString, schema: name } = schema.db;
  const relay = new OutboxRelay({ connectionString, schema: name, publisher, destinations: [destination] });
  let published = 0;
  relay.events.on('published', (b) => (published += b.count));
  await relay.start();
  try {
    await schema.outbox.publish(destination, 'first');
    await waitFor(() => published === 1, 'the first message in the broker');
    proxy.strand();
    const before = calls;
    await schema.outbox.publish(destination, 'stranded');
    await waitFor(() => calls > before, 'a batch sent into the silent connection');
  } finally {
    await relay.stop();
    await proxy.close();
  }
  expect(published).toBe(1);
  // Nothing of the given-up connection keeps the process alive (review 51: amqplib's
  // heartbeat timers did, for minutes): no more timers hold the event loop than before.
  await waitFor(() => timersHolding() <= timersBefore, 'the relay to leave no timer holding the process');
}

/** Timers that keep the process alive (unref'd ones do not count). */
function timersHolding(): number {
  return process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
}

describe.skipIf(!natsUp)('a silent network to NATS', () => {
  const stream = useNatsStream('silent');

  it('fails its batches as transient, publishes over a new connection, and stop() returns', async () => {
    const proxy = await startTcpProxy(NATS_URL);
    const publisher = natsPublisher({ servers: proxy.url, subjectPrefix: `${stream.prefix}.`, ackTimeoutMs: 1_000 });
    await ridesOutSilence(proxy, publisher, 'orders');
    const stored = (await readStream(stream.nc, stream.name)).map((m) => m.payload);
    // The re-publish after a timed-out ack is dropped by JetStream's de-duplication.
    expect([...stored].sort()).toEqual(
      [...Array.from({ length: 10 }, (_, n) => `before:${n}`), ...Array.from({ length: 10 }, (_, n) => `during:${n}`)].sort(),
    );
  });

  it('stop() returns at once with a batch waiting for acks over a silent connection', async () => {
    const proxy = await startTcpProxy(NATS_URL);
    const publisher = natsPublisher({
      servers: proxy.url,
      subjectPrefix: `${stream.prefix}.`,
      ackTimeoutMs: 120_000,
      connectOptions: { pingInterval: 120_000 }, // nothing finds the silence before the ack timeout
    });
    await stopsWithBatchInFlight(proxy, publisher, 'stop');
  });
});

describe.skipIf(!rabbitUp)('a silent network to RabbitMQ', () => {
  it('fails its batches as transient, publishes over a new connection, and stop() returns', async () => {
    const queue = `sluice-silent-${tag}`;
    const conn = await amqp.connect(AMQP_URL);
    const ch = await conn.createChannel();
    await ch.assertQueue(queue, { durable: false, autoDelete: false });
    try {
      const proxy = await startTcpProxy(AMQP_URL);
      const publisher = rabbitMqPublisher({ url: proxy.url, confirmTimeoutMs: 1_000 });
      await ridesOutSilence(proxy, publisher, queue);
      const got = new Set<string>();
      for (let m = await ch.get(queue, { noAck: true }); m; m = await ch.get(queue, { noAck: true })) {
        got.add(m.content.toString());
      }
      // RabbitMQ does not de-duplicate: a message may be there twice, none missing.
      for (let n = 0; n < 10; n++) {
        expect(got.has(`before:${n}`)).toBe(true);
        expect(got.has(`during:${n}`)).toBe(true);
      }
    } finally {
      await ch.deleteQueue(queue).catch(() => {});
      await conn.close();
    }
  });

  it('stop() returns at once with a batch waiting for confirms over a silent connection', async () => {
    const queue = `sluice-silent-stop-${tag}`;
    const conn = await amqp.connect(AMQP_URL);
    const ch = await conn.createChannel();
    await ch.assertQueue(queue, { durable: false, autoDelete: false });
    try {
      const proxy = await startTcpProxy(AMQP_URL);
      await stopsWithBatchInFlight(proxy, rabbitMqPublisher({ url: proxy.url, confirmTimeoutMs: 120_000 }), queue);
    } finally {
      await ch.deleteQueue(queue).catch(() => {});
      await conn.close();
    }
  });
});

// Outside review 96: stop() waited for a connect still under way until it gave up
// (the whole confirmTimeoutMs, 10 or 30 s), past a Kubernetes grace period.
describe('a broker that accepts connections and never answers', () => {
  it.each(['rabbitmq', 'nats'] as const)('%s: close() does not wait out a connect still under way', async (kind) => {
    const sockets: net.Socket[] = [];
    const server = net.createServer((socket) => void sockets.push(socket));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as net.AddressInfo;
    // Connects that wait 10 minutes for the broker's greeting: longer than the test may run.
    const publisher =
      kind === 'rabbitmq'
        ? rabbitMqPublisher({ url: `amqp://guest:guest@127.0.0.1:${port}`, confirmTimeoutMs: 600_000 })
        : natsPublisher({
            servers: `nats://127.0.0.1:${port}`,
            ackTimeoutMs: 600_000,
          });
    const publishing = publisher.publish([relayMessage()]);
    try {
      await waitFor(() => sockets.length > 0, 'the connect under way');
      await publisher.close();
    } finally {
      for (const socket of sockets) socket.destroy();
      server.close();
    }
    // The connect ends when its socket goes: the batch failed as transient, nothing was sent.
    const [result] = await publishing;
    expect(result).toMatchObject({ ok: false, transient: true });
  });

  // Outside review 98: ECONNRESET counted as NATS refusing the message, so messages the broker never saw became dead letters.
  it.each(['rabbitmq', 'nats'] as const)('%s: a connection reset at connect is transient', async (kind) => {
    const server = net.createServer((socket) => socket.resetAndDestroy());
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as net.AddressInfo;
    const publisher =
      kind === 'rabbitmq'
        ? rabbitMqPublisher({ url: `amqp://guest:guest@127.0.0.1:${port}` })
        : natsPublisher({ servers: `nats://127.0.0.1:${port}` });
    try {
      const [result] = await publisher.publish([relayMessage()]);
      expect(result).toMatchObject({ ok: false, transient: true });
      // Review 99: RabbitMQ's said only "read ECONNRESET". Without the password.
      const { message } = (result as { error: Error }).error;
      expect(message).toMatch(new RegExp(`^cannot reach (RabbitMQ at amqp|NATS at nats)://127\\.0\\.0\\.1:${port}: `));
    } finally {
      await publisher.close();
      server.close();
    }
  });
});
