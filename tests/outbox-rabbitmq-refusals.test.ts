import amqp from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OutboxRelay, rabbitMqPublisher, type OutboxRelayOptions } from '../src/index.js';
import { waitFor } from './helpers/database.js';
import { messageIdOf, useOutboxSchema } from './helpers/outbox.js';
import { privateRabbitMqMissing, startPrivateRabbitMq, type PrivateRabbitMq } from './helpers/private-rabbitmq.js';

// RabbitMQ refuses a message over its max_message_size by closing the channel (406)
// without naming it. The shared broker's limit must stay as it is, so this file
// runs a node of its own with a limit of 10,000 bytes.
const missing = privateRabbitMqMissing();
if (missing && process.env.SLUICE_REQUIRE_BROKERS === '1') throw new Error(`${missing} and SLUICE_REQUIRE_BROKERS=1`);
if (missing) process.stderr.write(`skipping the RabbitMQ refusal tests: ${missing}\n`);

const schema = useOutboxSchema('rmqrefuse');
let broker: PrivateRabbitMq | undefined;

beforeAll(async () => {
  if (missing) return;
  broker = await startPrivateRabbitMq('refuse');
  await broker.ctl('eval', 'application:set_env(rabbit, max_message_size, 10000).');
}, 120_000);
afterAll(async () => {
  await broker?.stop();
}, 60_000);

/**
 * A channel on the private node with `queue` declared durable: with persistent
 * messages its confirms come after the disk, so many are unconfirmed at any moment.
 */
async function durableQueue(queue: string) {
  const conn = await amqp.connect(broker!.url);
  const ch = await conn.createChannel();
  await ch.assertQueue(queue, { durable: true });
  return { conn, ch };
}

/** A relay of `queue` to the private node (not started). */
function relayTo(queue: string, options: Partial<OutboxRelayOptions>) {
  return new OutboxRelay({
    pool: schema.db.pool,
    schema: schema.db.schema,
    publisher: rabbitMqPublisher({ url: broker!.url }),
    destinations: [queue],
    ...options,
  });
}

describe.skipIf(missing)('relay to a RabbitMQ that refuses messages over its size limit', () => {
  it('names the refused message in every failure, dead-letters only it, and delivers every other one (outside reviews 186 and 189)', async () => {
    const queue = 'refusals';
    const { conn, ch } = await durableQueue(queue);
    const big = new Set([60, 150]);
    const ids = await schema.outbox.publishMany(
      Array.from({ length: 200 }, (_, i) => ({
        destination: queue,
        key: `k${i % 8}`,
        payload: big.has(i) ? 'x'.repeat(20_000) : `k${i % 8}:${i}`,
      })),
    );
    const refused = new Set(await Promise.all([...big].map((i) => messageIdOf(schema.db, ids[i]!))));
    const relay = relayTo(queue, {
      // Two partitions, so batches of both are out when the broker refuses one.
      partitions: 2,
      maxAttempts: 3,
      retry: { minMs: 20, maxMs: 50 },
    });
    const failures: { messageId: string; transient: boolean; attempts: number }[] = [];
    relay.events.on('failure', (f) => failures.push({ messageId: f.messageId, transient: f.transient, attempts: f.attempts }));
    const dead: string[] = [];
    relay.events.on('deadLetter', (d) => dead.push(d.messageId));
    const delivered: string[] = [];
    await ch.consume(queue, (m) => m && delivered.push(m.content.toString()), { noAck: true });
    await relay.start();
    try {
      await waitFor(() => dead.length === 2, 'both large messages dead-lettered', 30_000);
      await waitFor(() => new Set(delivered).size === 198, 'the other 198 delivered', 30_000);
      expect(new Set(dead)).toEqual(refused);
      // Until review 191 the other partition's batch, on the same channel, failed with
      // the refusal, naming its own messages; until review 189 the first failure named
      // an innocent message as transient; until review 186 innocent ones were dead-lettered.
      expect(failures.filter((f) => !refused.has(f.messageId))).toEqual([]);
      expect(failures.map((f) => `${f.transient}:${f.attempts}`).sort()).toEqual(
        ['false:1', 'false:2', 'false:3', 'false:1', 'false:2', 'false:3'].sort(),
      );
      // Messages the broker stored but had not confirmed when it closed the channel go
      // again (documented): the first delivery of each keeps the order of its key.
      const first = [...new Set(delivered)];
      for (let k = 0; k < 8; k++) {
        const ofKey = first.filter((p) => p.startsWith(`k${k}:`)).map((p) => Number(p.split(':')[1]));
        expect(ofKey).toEqual([...ofKey].sort((a, b) => a - b));
        expect(ofKey).toHaveLength(25 - [...big].filter((i) => i % 8 === k).length);
      }
    } finally {
      await relay.stop();
      await conn.close();
    }
  });

  it('counts no try against any message when the broker restarts under its batches (outside review 197)', async () => {
    const queue = 'restart';
    const { conn } = await durableQueue(queue);
    await conn.close();
    await schema.outbox.publishMany(
      Array.from({ length: 20_000 }, (_, i) => ({ destination: queue, key: `k${i % 64}`, payload: String(i) })),
    );
    const relay = relayTo(queue, {
      partitions: 4,
      batchSize: 5_000,
      retry: { minMs: 50, maxMs: 200 },
    });
    const counted: string[] = [];
    relay.events.on('failure', (f) => f.transient || counted.push(`${f.messageId}: ${f.error.message}`));
    let published = 0;
    relay.events.on('published', (b) => (published += b.count));
    await relay.start();
    try {
      await waitFor(() => published > 0, 'a first batch confirmed', 30_000);
      // amqplib fails the unconfirmed with "channel closed" before the channel's close event: taken for a nack, each counted a try.
      await broker!.ctl('stop_app');
      await broker!.ctl('start_app');
      await waitFor(() => published >= 20_000, 'all 20,000 confirmed after the restart', 60_000);
      expect(counted).toEqual([]);
    } finally {
      await relay.stop();
    }
  });

  it('waits out a broker that confirms slowly but steadily, however long the batch takes: nothing is sent twice (outside review 191)', async () => {
    const queue = 'slow';
    const { conn, ch } = await durableQueue(queue);
    await schema.outbox.publishMany(
      Array.from({ length: 40_000 }, (_, i) => ({ destination: queue, key: `k${i % 64}`, payload: String(i) })),
    );
    const relay = relayTo(queue, {
      publisher: rabbitMqPublisher({ url: broker!.url, confirmTimeoutMs: 4_000 }),
      // Four batches out at once, each on a channel of its own, on one connection.
      partitions: 4,
      batchSize: 20_000,
    });
    const failures: string[] = [];
    relay.events.on('failure', (f) => failures.push(f.error.message));
    let published = 0;
    relay.events.on('published', (b) => (published += b.count));
    const beam = Number(JSON.parse(await broker!.ctl('eval', 'os:getpid().')));
    await relay.start();
    try {
      // Frozen for 1 s at a time, well within the 4 s confirm timeout, the batch as a
      // whole past it: timed over the batch, it was given up and sent again. The thaws
      // are long enough for a loaded machine's broker to confirm something in each.
      for (let i = 0; i < 8 && published < 40_000; i++) {
        process.kill(beam, 'SIGSTOP');
        await new Promise((resolve) => setTimeout(resolve, 1_000));
        process.kill(beam, 'SIGCONT');
        await new Promise((resolve) => setTimeout(resolve, 400));
      }
      await waitFor(() => published === 40_000, 'all 40,000 confirmed', 30_000);
      expect(failures).toEqual([]);
      expect((await ch.checkQueue(queue)).messageCount).toBe(40_000);
    } finally {
      process.kill(beam, 'SIGCONT');
      await relay.stop();
      await conn.close();
    }
  });
});
