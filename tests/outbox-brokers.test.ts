import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import amqp from 'amqplib';
import { DiscardPolicy } from 'nats';
import { OutboxRelay, natsPublisher, rabbitMqPublisher, type OutboxRelayOptions, type RelayMessage } from '../src/index.js';
import { badSubject } from '../src/outbox/publishers/nats.js';
import { waitFor } from './helpers/database.js';
import { AMQP_URL, NATS_URL, brokerAvailable, createStream, readStream, useNatsStream } from './helpers/brokers.js';
import { messageIdOf, useOutboxSchema } from './helpers/outbox.js';
import { spawnCli } from './helpers/cli.js';

const natsUp = await brokerAvailable('NATS', NATS_URL);

/** A message as the relay hands it to a publisher, for publishers called directly. */
const message = (id: number, destination: string): RelayMessage => ({
  id: String(id),
  destination,
  key: null,
  headers: null,
  payload: Buffer.from(String(id)),
  createdAt: new Date(),
  messageId: `t:${tag}:${id}`,
});

/** `held` for a batch whose relay loses its lease after `n` messages were sent. */
const heldFor = (n: number) => {
  let asked = 0;
  return { held: () => asked++ < n };
};

/** The answers to a batch cut by heldFor: `sent` acked, the rest not sent and transient. */
const cutAfter = (sent: number, total: number) =>
  Array.from({ length: total }, (_, i) =>
    i < sent
      ? expect.objectContaining({ ok: true })
      : {
          ok: false,
          transient: true,
          error: expect.objectContaining({ message: expect.stringMatching(/lease on the partition ran out/) }),
        },
  );

const rabbitUp = await brokerAvailable('RabbitMQ', AMQP_URL);

const schema = useOutboxSchema('outbox_brokers');
const tag = randomBytes(4).toString('hex');

const keys = ['alpha', 'beta', 'gamma', 'delta'];
/** 200 messages over four keys, in 10 transactions; payload `<key>:<n>`, n counting per key. */
async function publishRounds(destination: string): Promise<void> {
  const next = new Map(keys.map((k) => [k, 0]));
  for (let t = 0; t < 10; t++) {
    await schema.outbox.publishMany(
      Array.from({ length: 20 }, (_, i) => {
        const key = keys[(t + i) % keys.length]!;
        const n = next.get(key)!;
        next.set(key, n + 1);
        return { destination, payload: `${key}:${n}`, key };
      }),
    );
  }
}

function expectOrderPerKey(payloads: string[]): void {
  for (const key of keys) {
    const mine = payloads.filter((p) => p.startsWith(`${key}:`));
    expect(mine).toEqual(mine.map((_, n) => `${key}:${n}`));
  }
}

describe.skipIf(!natsUp)('relay to a NATS stream with a short duplicate window', () => {
  const stream = useNatsStream('w', { duplicate_window: 1_000_000_000 });

  it('warns, once its first batch is in, when the window is under twice the lease (outside review 205)', async () => {
    const relayWith = (leaseMs: number, destination: string) => {
      const relay = new OutboxRelay({
        pool: schema.db.pool,
        schema: schema.db.schema,
        publisher: natsPublisher({ servers: NATS_URL, subjectPrefix: `${stream.prefix}.` }),
        destinations: [destination],
        leaseMs,
      });
      const warnings: { destination: string; message: string }[] = [];
      let published = 0;
      relay.events.on('warning', (w) => warnings.push(w));
      relay.events.on('published', (b) => (published += b.count));
      return { relay, warnings, published: () => published };
    };
    // A 1 s window covers a lease of 0.5 s.
    const short = relayWith(500, 'short-lease');
    await short.relay.start();
    try {
      await schema.outbox.publish('short-lease', 'x');
      await waitFor(() => short.published() === 1, 'the message in the stream');
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      expect(short.warnings).toEqual([]);
    } finally {
      await short.relay.stop();
    }
    // Not the default lease of 10 s: a takeover sends the dead relay's batch again after the window.
    const long = relayWith(10_000, 'long-lease');
    await long.relay.start();
    try {
      await schema.outbox.publishMany([1, 2].map((n) => ({ destination: 'long-lease', payload: String(n) })));
      await waitFor(() => long.warnings.length > 0, 'a warning');
      expect(long.warnings).toEqual([
        {
          destination: 'long-lease',
          message: expect.stringMatching(
            /^stream \S+ \(subject \S+\.long-lease\) drops duplicates for 1 s, under twice the relay's lease \(20 s\)/,
          ),
        },
      ]);
    } finally {
      await long.relay.stop();
    }
  });
});

describe.skipIf(!natsUp)('relay to NATS JetStream', () => {
  const stream = useNatsStream('t', { max_msg_size: 2048 });
  const { prefix } = stream;

  it('publishes in order per key with the stable message id; a re-publish is dropped as a duplicate', async () => {
    const publisher = natsPublisher({ servers: NATS_URL, subjectPrefix: `${prefix}.` });
    const sent: RelayMessage[] = [];
    const relay = new OutboxRelay({
      pool: schema.db.pool,
      schema: schema.db.schema,
      publisher,
      destinations: ['orders'],
      batchSize: 64,
    });
    relay.events.on('published', (b) => sent.push(...b.messages));
    await relay.start();
    try {
      await publishRounds('orders');
      await waitFor(() => sent.length === 200, 'all 200 acked by JetStream');
    } finally {
      await relay.stop();
    }
    const stored = await readStream(stream.nc, stream.name);
    expect(stored).toHaveLength(200);
    expect(stored.every((m) => m.subject === `${prefix}.orders`)).toBe(true);
    expectOrderPerKey(stored.map((m) => m.payload));
    expect(stored.map((m) => m.msgId)).toEqual(sent.map((m) => m.messageId));
    // <schema>:<outbox identity>:<id> (migration 0031).
    const origin = await messageIdOf(schema.db, '');
    expect(stored[0]!.msgId!.slice(0, origin.length)).toBe(origin);
    expect(stored[0]!.msgId!.slice(origin.length)).toMatch(/^\d+$/);
    expect(new Set(stored.map((m) => m.key))).toEqual(new Set(keys));

    // A relay that died after publishing and before recording sends the batch again: JetStream drops it.
    const again = natsPublisher({ servers: NATS_URL, subjectPrefix: `${prefix}.` });
    try {
      const results = await again.publish(sent.slice(0, 50));
      expect(results.every((r) => r.ok && r.duplicate)).toBe(true);
    } finally {
      await again.close();
    }
    expect(await readStream(stream.nc, stream.name)).toHaveLength(200);
  });

  it('sluice relay publishes to JetStream until SIGTERM, serves its metrics, then gives its lease up and exits 0', async () => {
    const args = [
      'relay',
      '--destination',
      'cli',
      '--subject-prefix',
      `${prefix}.`,
      '--nats-url',
      NATS_URL,
      '--metrics-port',
      '0',
    ];
    const cli = spawnCli(args, { DATABASE_URL: schema.db.url, SLUICE_SCHEMA: schema.db.schema });
    await waitFor(() => cli.stdout().includes('acquired destination=cli'), 'the CLI relay holding its partition');
    await schema.outbox.publishMany(Array.from({ length: 10 }, (_, i) => ({ destination: 'cli', payload: `c${i}`, key: 'c' })));
    const onCli = async () => (await readStream(stream.nc, stream.name)).filter((m) => m.subject === `${prefix}.cli`);
    await waitFor(async () => (await onCli()).length === 10, 'ten messages through the CLI relay');
    expect((await onCli()).map((m) => m.payload)).toEqual(Array.from({ length: 10 }, (_, i) => `c${i}`));
    const url = /started .*metrics=(http:\/\/\S+)/.exec(cli.stdout())?.[1];
    expect(url, cli.stdout()).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
    const scraped = await (await fetch(url!)).text();
    expect(scraped).toContain(`sluice_outbox_published_total{schema="${schema.db.schema}",destination="cli"} 10`);
    expect(scraped).toContain(`sluice_outbox_lag_messages{schema="${schema.db.schema}",destination="cli"} 0`);
    cli.child.kill('SIGTERM');
    const result = await cli.exited;
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(/stopped published=10/);
    const { rows } = await schema.db.pool.query(`SELECT holder FROM ${schema.db.s}.outbox_relays WHERE destination = 'cli'`);
    expect(rows).toEqual([{ holder: null }]);
    // The endpoint went with the process.
    await expect(fetch(url!)).rejects.toThrow();
  });

  it('a message JetStream refuses becomes a dead letter; its key goes on', async () => {
    const publisher = natsPublisher({ servers: NATS_URL, subjectPrefix: `${prefix}.` });
    const relay = new OutboxRelay({
      pool: schema.db.pool,
      schema: schema.db.schema,
      publisher,
      destinations: ['poison'],
      maxAttempts: 2,
      retry: { minMs: 10, maxMs: 20 },
    });
    const dead: string[] = [];
    relay.events.on('deadLetter', (d) => dead.push(d.messageId));
    await relay.start();
    try {
      const ids = await schema.outbox.publishMany([
        { destination: 'poison', payload: 'first', key: 'p' },
        { destination: 'poison', payload: 'x'.repeat(4096), key: 'p' }, // over the stream's max_msg_size
        { destination: 'poison', payload: 'third', key: 'p' },
      ]);
      await waitFor(() => dead.length === 1, 'the oversized message dead-lettered');
      expect(dead).toEqual([await messageIdOf(schema.db, ids[1]!)]);
      await waitFor(
        async () => (await readStream(stream.nc, stream.name)).filter((m) => m.subject === `${prefix}.poison`).length === 2,
        'its neighbours published',
      );
      const poison = (await readStream(stream.nc, stream.name))
        .filter((m) => m.subject === `${prefix}.poison`)
        .map((m) => m.payload);
      expect(poison).toEqual(['first', 'third']);
      const { rows } = await schema.db.pool.query(
        `SELECT attempts, last_error FROM ${schema.db.s}.outbox_dead_letters WHERE id = $1`,
        [ids[1]],
      );
      expect(rows[0].attempts).toBe(2);
      expect(rows[0].last_error).toMatch(/size|payload/i);
    } finally {
      await relay.stop();
    }
  });

  it("a full stream that discards new messages makes them wait, in the broker's words, not as no responders (outside reviews 186, 189)", async () => {
    // Said to be "no stream captures the subject" (186); counted as tries, the backlog
    // became dead letters one by one, none of them bad (189).
    const full = `${prefix}full`;
    const jsm = await stream.nc.jetstreamManager();
    await createStream(jsm, `${stream.name}_FULL`, full, { max_msgs: 2, discard: DiscardPolicy.New });
    const relay = new OutboxRelay({
      pool: schema.db.pool,
      schema: schema.db.schema,
      publisher: natsPublisher({ servers: NATS_URL, subjectPrefix: `${full}.` }),
      destinations: ['d'],
      maxAttempts: 2,
      retry: { minMs: 10, maxMs: 20 },
    });
    const failures: { transient: boolean; message: string }[] = [];
    relay.events.on('failure', (f) => failures.push({ transient: f.transient, message: f.error.message }));
    try {
      await schema.outbox.publishMany(['1', '2', '3'].map((payload) => ({ destination: 'd', payload, key: 'k' })));
      await relay.start();
      await waitFor(() => failures.length >= 3, 'the third refused a few times');
      expect(
        failures.every((f) => f.transient && /JetStream refused the message: maximum messages exceeded/.test(f.message)),
      ).toBe(true);
      const { rows } = await schema.db.pool.query(
        `SELECT count(*)::int AS n FROM ${schema.db.s}.outbox_dead_letters WHERE destination = 'd'`,
      );
      expect(rows[0].n).toBe(0);
      // Room again: it goes.
      await jsm.streams.purge(`${stream.name}_FULL`);
      await waitFor(async () => (await jsm.streams.info(`${stream.name}_FULL`)).state.messages === 1, 'the third published');
    } finally {
      await relay.stop();
      await jsm.streams.delete(`${stream.name}_FULL`).catch(() => {});
    }
  });

  it('a row whose headers or key NATS cannot carry is refused and dead-lettered, and its partition goes on', async () => {
    const publisher = natsPublisher({ servers: NATS_URL, subjectPrefix: `${prefix}.` });
    const relay = new OutboxRelay({
      pool: schema.db.pool,
      schema: schema.db.schema,
      publisher,
      destinations: ['headers'],
      maxAttempts: 2,
      retry: { minMs: 10, maxMs: 20 },
    });
    const dead: string[] = [];
    relay.events.on('deadLetter', (d) => dead.push(d.messageId.slice(d.messageId.lastIndexOf(':') + 1)));
    try {
      // Review 62: rows publish() refuses, written straight into the table (older rows,
      // other code). Each failed the whole batch as transient, for ever; now each is a
      // dead letter at the first try (review 63: after maxAttempts tries with backoff
      // it held its key back for a minute).
      const { rows } = await schema.db.pool.query<{ id: string }>(
        `INSERT INTO ${schema.db.s}.outbox (destination, key, headers, payload)
         SELECT 'headers', k, h::jsonb, convert_to(p, 'UTF8')
         FROM (VALUES (1, 'a', NULL, 'first'), (2, 'a', '{"x":"a\\r\\nb"}', 'crlf'), (3, 'b', '{"y":5}', 'number'),
                      (4, 'b', '{"bad name":"v"}', 'space'), (5, 'a', NULL, 'last of a'),
                      (6, E'c\\r\\nd', NULL, 'key with a line break'), (7, 'b', NULL, 'last of b'),
                      -- Review 64: passed through, and a rollup purged the subject's messages.
                      (8, 'a', '{"Nats-Rollup":"sub"}', 'rollup'), (9, 'b', '{"nats-msg-id":"forged"}', 'forged id'),
                      -- Review 250: sent, and lost by JavaScript consumers, which read it as the prototype.
                      (10, 'b', '{"__proto__":"x"}', 'proto')) AS v(n, k, h, p)
         ORDER BY n RETURNING id::text`,
      );
      // Review 96: 20,000 headers took nats.js seconds to set, past every ack timeout: retried for ever.
      const many = Object.fromEntries(Array.from({ length: 20_000 }, (_, i) => [`h${i}`, 'v']));
      const { rows: crowded } = await schema.db.pool.query<{ id: string }>(
        `INSERT INTO ${schema.db.s}.outbox (destination, key, headers, payload) VALUES ('headers', 'c', $1, 'x') RETURNING id::text`,
        [JSON.stringify(many)],
      );
      await relay.start();
      await waitFor(() => dead.length === 8, 'the eight messages NATS cannot carry dead-lettered');
      expect(dead.sort()).toEqual([...[1, 2, 3, 5, 7, 8, 9].map((i) => rows[i]!.id), crowded[0]!.id].sort());
      await waitFor(
        async () => (await readStream(stream.nc, stream.name)).filter((m) => m.subject === `${prefix}.headers`).length === 3,
        'the others published',
      );
      const sent = (await readStream(stream.nc, stream.name)).filter((m) => m.subject === `${prefix}.headers`);
      expect(sent.map((m) => m.payload)).toEqual(['first', 'last of a', 'last of b']);
      const letters = await schema.db.pool.query<{ last_error: string }>(
        `SELECT last_error FROM ${schema.db.s}.outbox_dead_letters WHERE id = $1`,
        [rows[2]!.id],
      );
      expect(letters.rows[0]!.last_error).toMatch(/NATS cannot carry its headers or key: header y is not a string/);
      const [crowdedLetter] = (
        await schema.db.pool.query<{ last_error: string }>(
          `SELECT last_error FROM ${schema.db.s}.outbox_dead_letters WHERE id = $1`,
          [crowded[0]!.id],
        )
      ).rows;
      expect(crowdedLetter!.last_error).toMatch(
        /NATS cannot carry its headers or key: it has 20000 headers, more than the 100 allowed/,
      );
      const tries = await schema.db.pool.query<{ attempts: number }>(
        `SELECT attempts FROM ${schema.db.s}.outbox_dead_letters WHERE id = ANY($1::bigint[])`,
        [dead],
      );
      expect(tries.rows.map((r) => r.attempts)).toEqual([1, 1, 1, 1, 1, 1, 1, 1]);
    } finally {
      await relay.stop();
    }
  });

  it('a destination that is no NATS subject is refused and dead-lettered; one no stream captures waits, named', async () => {
    const publisher = natsPublisher({ servers: NATS_URL, subjectPrefix: `${prefix}.` });
    const uncaptured = natsPublisher({ servers: NATS_URL, subjectPrefix: `nostream${tag}.`, ackTimeoutMs: 1_000 });
    try {
      // Review 46: these timed out or got 503 on every try, counted as transient, for ever.
      const bad = ['bad dest', 'orders..x', 'orders.*', 'orders.>'];
      const results = await publisher.publish(bad.map((destination, i) => message(i, destination)));
      expect(results.map((r) => (r.ok ? 'ok' : `${r.transient}: ${r.error.message}`))).toEqual(
        bad.map((d) => `false: "${prefix}.${d}" is not a NATS subject to publish to: ${badSubject(`${prefix}.${d}`)}`),
      );
      expect(badSubject(`${prefix}.orders.paid`)).toBeUndefined();
      const [result] = await uncaptured.publish([message(9, 'x')]);
      expect(result).toMatchObject({ ok: false, transient: true });
      expect((result as { error: Error }).error.message).toMatch(/no JetStream stream captures subject|timeout/i);
    } finally {
      await Promise.all([publisher.close(), uncaptured.close()]);
    }
  });

  it('a tls:// URL asks for TLS: a server without it is refused, not spoken to in clear (outside review 247)', async () => {
    const publisher = natsPublisher({ servers: NATS_URL.replace(/^nats:/, 'tls:'), subjectPrefix: `${prefix}.` });
    try {
      const [result] = await publisher.publish([message(2_001, 'clear')]);
      expect(result).toMatchObject({ ok: false, transient: true });
      expect((result as { error: Error }).error.message).toMatch(
        /: the server offers no TLS, and a tls:\/\/ URL .* asks for it$/,
      );
      const stored = (await readStream(stream.nc, stream.name)).filter((m) => m.subject === `${prefix}.clear`);
      expect(stored).toEqual([]);
    } finally {
      await publisher.close();
    }
  });

  it('sends no more of a batch once the relay says its lease ran out (outside review 247)', async () => {
    const publisher = natsPublisher({ servers: NATS_URL, subjectPrefix: `${prefix}.` });
    try {
      const batch = [1, 2, 3, 4, 5].map((id) => message(1_000 + id, 'cut'));
      const results = await publisher.publish(batch, heldFor(2));
      expect(results).toEqual(cutAfter(2, 5));
      const stored = (await readStream(stream.nc, stream.name)).filter((m) => m.subject === `${prefix}.cut`);
      expect(stored.map((m) => m.payload)).toEqual(['1001', '1002']);
    } finally {
      await publisher.close();
    }
  });
});

/** A channel on RabbitMQ with `queue` declared, and a relay of that destination (not started). */
async function rabbitRelay(queue: string, options: Partial<OutboxRelayOptions> = {}) {
  const conn = await amqp.connect(AMQP_URL);
  const ch = await conn.createChannel();
  await ch.assertQueue(queue, { durable: false, autoDelete: false });
  const relay = new OutboxRelay({
    pool: schema.db.pool,
    schema: schema.db.schema,
    publisher: rabbitMqPublisher({ url: AMQP_URL }),
    destinations: [queue],
    ...options,
  });
  return { conn, ch, relay };
}

describe.skipIf(!rabbitUp)('relay to RabbitMQ', () => {
  it('names a vhost that does not exist, and waits for it as for an outage (outside review 271)', async () => {
    const url = new URL(AMQP_URL);
    url.pathname = `/sluice-no-vhost-${tag}`;
    const publisher = rabbitMqPublisher({ url: url.toString() });
    try {
      const [result] = await publisher.publish([message(1, 'q')]);
      expect(result).toEqual({
        ok: false,
        transient: true,
        error: expect.objectContaining({
          message: expect.stringMatching(
            new RegExp(
              `^cannot reach RabbitMQ at .*: RabbitMQ closed the connection as it opened: the vhost "sluice-no-vhost-${tag}" does not exist, or the user may not use it`,
            ),
          ),
        }),
      });
    } finally {
      await publisher.close();
    }
  });

  it('sends no more of a batch once the relay says its lease ran out (outside review 247)', async () => {
    const queue = `sluice-cut-${tag}`;
    const { conn, ch } = await rabbitRelay(queue);
    const publisher = rabbitMqPublisher({ url: AMQP_URL });
    try {
      const batch = [1, 2, 3, 4, 5].map((id) => message(id, queue));
      expect(await publisher.publish(batch, heldFor(3))).toEqual(cutAfter(3, 5));
      const got: string[] = [];
      for (let m = await ch.get(queue, { noAck: true }); m; m = await ch.get(queue, { noAck: true }))
        got.push(m.content.toString());
      expect(got).toEqual(['1', '2', '3']);
    } finally {
      await publisher.close();
      await ch.deleteQueue(queue).catch(() => {});
      await conn.close();
    }
  });

  it('publishes with publisher confirms, in order per key, with the stable message_id and the key header', async () => {
    const queue = `sluice-t-${tag}`;
    const { conn, ch, relay } = await rabbitRelay(queue, { batchSize: 64 });
    let published = 0;
    relay.events.on('published', (b) => (published += b.count));
    await relay.start();
    try {
      await publishRounds(queue);
      await waitFor(() => published === 200, 'all 200 confirmed by RabbitMQ');
      const got: { payload: string; messageId: unknown; key: unknown }[] = [];
      for (;;) {
        const m = await ch.get(queue, { noAck: true });
        if (!m) break;
        got.push({ payload: m.content.toString(), messageId: m.properties.messageId, key: m.properties.headers?.['sluice-key'] });
      }
      expect(got).toHaveLength(200);
      expectOrderPerKey(got.map((m) => m.payload));
      const origin = (await messageIdOf(schema.db, '')).slice(0, -1);
      expect(got.every((m) => typeof m.messageId === 'string' && m.messageId.startsWith(`${origin}:`))).toBe(true);
      expect(new Set(got.map((m) => m.messageId)).size).toBe(200);
      expect(got.every((m) => m.payload.startsWith(`${String(m.key)}:`))).toBe(true);
    } finally {
      await relay.stop();
      await ch.deleteQueue(queue).catch(() => {});
      await conn.close();
    }
  });

  it('a row whose headers RabbitMQ must not get is dead-lettered at once, and its key goes on (outside review 184)', async () => {
    // Written past publish(): a CC string made RabbitMQ close the channel (taken for
    // an outage, retried for ever, the partition blocked); a CC array copied the
    // message to another queue; a Sluice-Key header spoofed the key.
    const queue = `sluice-t-hdr-${tag}`;
    const { conn, ch, relay } = await rabbitRelay(queue, { maxAttempts: 5, retry: { minMs: 10, maxMs: 20 } });
    const dead: string[] = [];
    relay.events.on('deadLetter', (d) => dead.push(d.messageId.slice(d.messageId.lastIndexOf(':') + 1)));
    try {
      const { rows } = await schema.db.pool.query<{ id: string }>(
        `INSERT INTO ${schema.db.s}.outbox (destination, key, headers, payload)
         SELECT $1, 'k', h::jsonb, convert_to(p, 'UTF8')
         FROM (VALUES (1, '{"CC":"elsewhere"}', 'cc string'), (2, '{"CC":["elsewhere"]}', 'cc array'),
                      (3, '{"BCC":"x"}', 'bcc'), (4, '{"sluice-key":"spoof"}', 'spoof'), (5, '{"n":5}', 'number'),
                      (6, NULL, 'after them')) AS v(n, h, p)
         ORDER BY n RETURNING id::text`,
        [queue],
      );
      await relay.start();
      const got: string[] = [];
      await waitFor(async () => {
        for (let m = await ch.get(queue, { noAck: true }); m; m = await ch.get(queue, { noAck: true }))
          got.push(m.content.toString());
        return got.length > 0;
      }, 'the message behind them');
      expect(got).toEqual(['after them']);
      // The broker may have taken the last one before the relay recorded the others.
      await waitFor(() => dead.length === 5, 'the five dead-lettered');
      expect(dead.sort()).toEqual(
        rows
          .slice(0, 5)
          .map((r) => r.id)
          .sort(),
      );
      const letters = await schema.db.pool.query<{ attempts: number; last_error: string }>(
        `SELECT attempts, last_error FROM ${schema.db.s}.outbox_dead_letters WHERE id = $1`,
        [rows[0]!.id],
      );
      expect(letters.rows).toEqual([
        { attempts: 1, last_error: expect.stringMatching(/RabbitMQ cannot carry its headers: header CC is reserved/) },
      ]);
    } finally {
      await relay.stop();
      await ch.deleteQueue(queue).catch(() => {});
      await conn.close();
    }
  });

  it('a message no queue receives is refused, not lost: published once its queue exists, else a dead letter', async () => {
    const late = `sluice-t-late-${tag}`;
    const never = `sluice-t-never-${tag}`;
    const conn = await amqp.connect(AMQP_URL);
    const ch = await conn.createChannel();
    const relay = new OutboxRelay({
      pool: schema.db.pool,
      schema: schema.db.schema,
      publisher: rabbitMqPublisher({ url: AMQP_URL }),
      destinations: [late, never],
      maxAttempts: 30,
      retry: { minMs: 20, maxMs: 40 },
    });
    const failures: string[] = [];
    const dead: string[] = [];
    relay.events.on('failure', (f) => failures.push(`${f.destination}: ${f.error.message}`));
    relay.events.on('deadLetter', (d) => dead.push(d.destination));
    await relay.start();
    try {
      await schema.outbox.publishMany(['1', '2', '3'].map((payload) => ({ destination: late, payload, key: 'k' })));
      await schema.outbox.publish(never, 'nowhere');
      await waitFor(() => failures.some((f) => f.startsWith(late)), 'the first message returned');
      expect(failures.find((f) => f.startsWith(late))).toMatch(/unroutable: no queue named/);
      await ch.assertQueue(late, { durable: false, autoDelete: false });
      const got: string[] = [];
      await waitFor(async () => {
        for (let m = await ch.get(late, { noAck: true }); m; m = await ch.get(late, { noAck: true }))
          got.push(m.content.toString());
        return got.length === 3;
      }, 'all three once the queue exists');
      // A queue declared while a try is in flight can split it: 1 returned, 2 and 3
      // routed, then 1 on its next try (the README's "can land after its successors").
      expect([...got].sort()).toEqual(['1', '2', '3']);
      await waitFor(() => dead.includes(never), 'the unroutable message dead-lettered after its tries');
      const { rows } = await schema.db.pool.query(
        `SELECT attempts, last_error FROM ${schema.db.s}.outbox_dead_letters WHERE destination = $1`,
        [never],
      );
      expect(rows).toEqual([{ attempts: 30, last_error: expect.stringMatching(/unroutable/) }]);
    } finally {
      await relay.stop();
      await ch.deleteQueue(late).catch(() => {});
      await conn.close();
    }
  });

  it('a queue full (max-length, reject-publish) makes messages wait, counting no try, until it has room (outside review 197)', async () => {
    const queue = `sluice-t-full-${tag}`;
    const conn = await amqp.connect(AMQP_URL);
    const ch = await conn.createChannel();
    await ch.assertQueue(queue, { durable: false, arguments: { 'x-max-length': 5, 'x-overflow': 'reject-publish' } });
    const relay = new OutboxRelay({
      pool: schema.db.pool,
      schema: schema.db.schema,
      publisher: rabbitMqPublisher({ url: AMQP_URL }),
      destinations: [queue],
      maxAttempts: 2,
      retry: { minMs: 20, maxMs: 50 },
    });
    const failures: { transient: boolean; error: string }[] = [];
    relay.events.on('failure', (f) => failures.push({ transient: f.transient, error: f.error.message }));
    await relay.start();
    try {
      await schema.outbox.publishMany(
        Array.from({ length: 12 }, (_, i) => ({ destination: queue, payload: String(i), key: 'k' })),
      );
      await waitFor(() => failures.length >= 3, 'the full queue refusing');
      // Counted, maxAttempts 2 dead-lettered the messages behind the first five.
      expect(failures.every((f) => f.transient && /queue full/.test(f.error))).toBe(true);
      const got: string[] = [];
      await waitFor(async () => {
        for (let m = await ch.get(queue, { noAck: true }); m; m = await ch.get(queue, { noAck: true }))
          got.push(m.content.toString());
        return got.length === 12;
      }, 'all 12 through as the queue is emptied');
      expect(got).toEqual(Array.from({ length: 12 }, (_, i) => String(i)));
      expect(
        (await schema.db.pool.query(`SELECT 1 FROM ${schema.db.s}.outbox_dead_letters WHERE destination = $1`, [queue])).rowCount,
      ).toBe(0);
    } finally {
      await relay.stop();
      await ch.deleteQueue(queue).catch(() => {});
      await conn.close();
    }
  });
});
