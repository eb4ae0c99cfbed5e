import { describe, expect, it } from 'vitest';
import {
  Outbox,
  OutboxRelay,
  ValidationError,
  ConfigError,
  natsPublisher,
  rabbitMqPublisher,
  RelayMetrics,
  SluiceMetrics,
} from '../src/index.js';
import { createTestSchema, waitFor } from './helpers/database.js';
import { captureWarnings } from './helpers/warnings.js';
import { MemoryBroker, useMemoryRelays } from './helpers/outbox.js';

const { db, outbox, startRelay, count, freshDestination } = useMemoryRelays('outbox_publish');

describe('publish', () => {
  it('commits and rolls back with the caller transaction', async () => {
    const d = freshDestination();
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await outbox.publish(d, { n: 1 }, { tx: client });
      await client.query('ROLLBACK');
      await client.query('BEGIN');
      const id = await outbox.publish(d, { n: 2 }, { tx: client, key: 'k', headers: { 'x-a': 'b' } });
      // Not visible outside the transaction before COMMIT.
      expect(await count('outbox', d)).toBe(0);
      await client.query('COMMIT');
      const { rows } = await db.pool.query(
        `SELECT id, key, headers, convert_from(payload, 'UTF8') AS body FROM ${db.s}.outbox WHERE destination = $1`,
        [d],
      );
      expect(rows).toEqual([{ id, key: 'k', headers: { 'x-a': 'b' }, body: '{"n":2}' }]);
    } finally {
      client.release();
    }
  });

  it('warns when a publish through a pg client committed on its own (no BEGIN), once per client', async () => {
    const d = freshDestination();
    const warnings = captureWarnings('SLUICE_TX_AUTOCOMMIT');
    const [one, two] = [await db.pool.connect(), await db.pool.connect()];
    try {
      await one.query('BEGIN');
      await outbox.publish(d, 'in a transaction', { tx: one });
      await one.query('COMMIT');
      expect(await warnings.settled()).toEqual([]);
      await outbox.publish(d, 'alone', { tx: one });
      await outbox.publish(d, 'alone again', { tx: one });
      await outbox.publishMany([{ destination: d, payload: 'many alone' }], { tx: two });
      expect(await warnings.settled()).toEqual([
        expect.stringMatching(/^publish: the message was written through a pg client that is in no transaction/),
        expect.stringMatching(/^publishMany: the messages were written through a pg client that is in no transaction/),
      ]);
      expect(await count('outbox', d)).toBe(4);
    } finally {
      warnings.stop();
      one.release();
      two.release();
    }
  });

  it('publishMany keeps the array order in the ids; the SQL function publishes text, jsonb and bytes', async () => {
    const d = freshDestination();
    const ids = await outbox.publishMany([
      { destination: d, payload: 'a', key: 'k' },
      { destination: d, payload: new Uint8Array([0, 255]), key: 'k' },
      { destination: d, payload: { c: true }, key: 'k', headers: { h: 'v' } },
    ]);
    expect(ids.map(Number)).toEqual([...ids.map(Number)].sort((a, b) => a - b));
    await db.pool.query(`SELECT ${db.s}.publish($1, 'text body', 'k2')`, [d]);
    await db.pool.query(`SELECT ${db.s}.publish($1, '{"j":1}'::jsonb, NULL, '{"h":"v"}')`, [d]);
    await db.pool.query(`SELECT ${db.s}.publish($1, '\\x0102'::bytea)`, [d]);
    const { rows } = await db.pool.query(
      `SELECT encode(payload, 'hex') AS hex FROM ${db.s}.outbox WHERE destination = $1 ORDER BY id`,
      [d],
    );
    expect(rows.map((r) => r.hex)).toEqual([
      Buffer.from('a').toString('hex'),
      '00ff',
      Buffer.from('{"c":true}').toString('hex'),
      Buffer.from('text body').toString('hex'),
      Buffer.from('{"j": 1}').toString('hex'),
      '0102',
    ]);
  });

  it('a rolled-back SQL publish() from a trigger writes nothing', async () => {
    const d = freshDestination();
    await db.pool.query(`CREATE TABLE ${db.s}.orders (id int PRIMARY KEY)`);
    await db.pool.query(`CREATE FUNCTION ${db.s}.order_event() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN PERFORM ${db.s}.publish('${d}', jsonb_build_object('order', NEW.id), NEW.id::text); RETURN NEW; END $$`);
    await db.pool.query(
      `CREATE TRIGGER order_event AFTER INSERT ON ${db.s}.orders FOR EACH ROW EXECUTE FUNCTION ${db.s}.order_event()`,
    );
    await db.pool.query(`INSERT INTO ${db.s}.orders VALUES (1)`);
    await expect(db.pool.query(`INSERT INTO ${db.s}.orders VALUES (2), (1)`)).rejects.toThrow(/duplicate key/);
    const { rows } = await db.pool.query(`SELECT key FROM ${db.s}.outbox WHERE destination = $1`, [d]);
    expect(rows).toEqual([{ key: '1' }]);
  });

  it('refuses bad input with a ValidationError and writes nothing', async () => {
    const d = freshDestination();
    // 266 bytes: 10 for the payload, key and headers, 256 kept for the relay's own headers.
    const small = new Outbox({ pool: db.pool, schema: db.schema, maxMessageBytes: 266 });
    const bad: [unknown, unknown, unknown][] = [
      ['', 'x', {}],
      ['x'.repeat(256), 'x', {}],
      [d, 'x'.repeat(11), {}],
      [d, 'x'.repeat(6), { key: 'kkkkk' }], // 11 with its key
      [d, 'x', { headers: { h: 'vvvvvv' } }], // 11 with its header line
      // Review 46: stored as {}, as an object keyed by index, or with U+FFFD for the surrogate.
      [d, new ArrayBuffer(3), {}],
      [d, new Uint16Array([1, 2]), {}],
      [d, { data: new Float32Array(1) }, {}],
      [d, '\ud800', {}],
      [d, 'x', { headers: { 'Nats-Msg-Id': 'mine' } }],
      [d, 'x', { headers: { 'sluice-key': 'k' } }],
      [d, undefined, {}],
      [d, 'x', { key: 5 }],
      [d, 'x', { headers: { 'bad name': 'v' } }],
      [d, 'x', { headers: { h: 1 } }],
      [d, 'x', { headers: { h: 'a\r\nb' } }],
      [d, 'x', { key: 'a\nb' }],
      [d, 'x', { headers: { 'Nats-Rollup': 'sub' } }],
      [d, 'x', { headers: new Map([['a', 'b']]) }], // review 64: stored as no headers
      [d, 'x', { headers: [] }],
      [d, 'x', { key: 'nul\0' }],
      [d, 'x', { priority: 1 }],
    ];
    for (const [destination, payload, options] of bad) {
      await expect(small.publish(destination as string, payload as string, options as object)).rejects.toBeInstanceOf(
        ValidationError,
      );
    }
    await expect(
      small.publishMany([
        { destination: d, payload: 'ok' },
        { destination: d, payload: 'x'.repeat(11) },
      ]),
    ).rejects.toThrow(/^publishMany: message 1: the message is 267 bytes/);
    // Review 96: 20,000 headers passed, and jammed the NATS relay's partition.
    const headers = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`h${i}`, 'v']));
    await expect(outbox.publish(d, 'x', { headers: headers(101) })).rejects.toThrow(
      /^publish: it has 101 headers, more than the 100 allowed$/,
    );
    await expect(outbox.publish(d, 'x', { headers: { h: 'v'.repeat(32 * 1024) } })).rejects.toThrow(
      /^publish: its headers take 32773 bytes, more than the 32768 allowed$/,
    );
    // Review 98: AMQP's limit on a header name.
    await expect(outbox.publish(d, 'x', { headers: { ['n'.repeat(256)]: 'v' } })).rejects.toThrow(
      /^publish: header name "n{20}…" is longer than 255 bytes$/,
    );
    await outbox.publish(d, 'x', { headers: { ['n'.repeat(255)]: 'v' } });
    await db.pool.query(`DELETE FROM ${db.s}.outbox WHERE destination = $1`, [d]);
    expect(await count('outbox', d)).toBe(0);
    // Exactly at both limits: 100 headers; h0-h98 take 10 × 7 + 89 × 8 bytes ("h0: v\r\n"), h the rest.
    await outbox.publish(d, 'x', { headers: { ...headers(99), h: 'v'.repeat(32 * 1024 - 782 - 5) } });
    expect(await count('outbox', d)).toBe(1);
    await db.pool.query(`DELETE FROM ${db.s}.outbox WHERE destination = $1`, [d]);
    // Exactly at the limit, and bytes with a NUL (bytes, not text): written.
    await small.publish(d, 'xxx', { key: 'kk', headers: { h: '' } }); // 3 + 2 + "h: \r\n"
    await small.publish(d, new Uint8Array([0, 1, 2]));
    expect(await count('outbox', d)).toBe(2);
    await db.pool.query(`DELETE FROM ${db.s}.outbox WHERE destination = $1`, [d]);
    expect(() => new OutboxRelay({ pool: db.pool, publisher: new MemoryBroker(), destinations: [] })).toThrow(ConfigError);
    expect(() => new OutboxRelay({ pool: db.pool, publisher: {} as never, destinations: ['a'] })).toThrow(ConfigError);
    expect(() => new OutboxRelay({ pool: db.pool, publisher: new MemoryBroker(), destinations: ['a'], partitions: 0 })).toThrow(
      ConfigError,
    );
    await small.close();
  });

  it('counts a relay observed twice once, and checks the option names of metrics and destinations (outside review 173)', async () => {
    expect(() => new RelayMetrics({ regsitry: 1 } as never)).toThrow('RelayMetrics: unknown option "regsitry"');
    // Twice on one registry, or no registry at all: a ConfigError, not prom-client's Error or a TypeError (outside review 245).
    const shared = new RelayMetrics();
    expect(() => new RelayMetrics({ registry: shared.registry })).toThrow(ConfigError);
    expect(() => new RelayMetrics({ registry: 5 as never })).toThrow('RelayMetrics: registry must be a prom-client Registry');
    expect(() => new SluiceMetrics({ regsitry: 1 } as never)).toThrow('SluiceMetrics: unknown option "regsitry"');
    expect(() => startRelay(new MemoryBroker(), [{ name: 'a', partitons: 2 } as never])).toThrow(
      'OutboxRelay: destination: unknown option "partitons"',
    );
    const d = freshDestination();
    const broker = new MemoryBroker();
    const relay = startRelay(broker, [d]);
    const metrics = new RelayMetrics();
    metrics.observe(relay);
    metrics.observe(relay);
    await relay.start();
    await outbox.publishMany([1, 2, 3].map((n) => ({ destination: d, payload: { n } })));
    await waitFor(() => broker.stored.length === 3, 'the messages published');
    await waitFor(
      async () =>
        (await metrics.registry.metrics()).includes(`sluice_outbox_published_total{schema="${db.schema}",destination="${d}"} 3`),
      'the three counted once each',
    );
    expect(await metrics.registry.metrics()).toContain(
      `sluice_outbox_publish_latency_seconds_count{schema="${db.schema}",destination="${d}"} 3`,
    );
  });

  it('keeps the relays of two schemas apart in one RelayMetrics: counts and lag (outside review 248)', async () => {
    const other = await createTestSchema('outbox_other');
    const otherOutbox = new Outbox({ pool: other.pool, schema: other.schema });
    const d = freshDestination();
    const broker = new MemoryBroker();
    const mine = startRelay(broker, [d]);
    const relayOf = (destination: string) =>
      new OutboxRelay({ pool: other.pool, schema: other.schema, publisher: new MemoryBroker(), destinations: [destination] });
    // The other schema's relay of d ran once and stopped: what is published there next waits.
    const gone = relayOf(d);
    await gone.start();
    await gone.stop();
    const theirs = relayOf(`${d}.elsewhere`);
    const metrics = new RelayMetrics();
    metrics.observe(mine);
    metrics.observe(theirs);
    try {
      await mine.start();
      await theirs.start();
      await outbox.publishMany([1, 2].map((n) => ({ destination: d, payload: { n } })));
      await otherOutbox.publishMany([1, 2, 3].map((n) => ({ destination: d, payload: { n } })));
      const counted = `sluice_outbox_published_total{schema="${db.schema}",destination="${d}"} 2`;
      // Counted when the batch is recorded, after the broker has it.
      await waitFor(async () => (await metrics.registry.metrics()).includes(counted), 'the first schema relayed and counted');
      const text = await metrics.registry.metrics();
      expect(text).not.toContain(`sluice_outbox_published_total{schema="${other.schema}",destination="${d}"}`);
      // Each schema's own lag: with one series per destination, the one read last stood for both.
      expect(text).toContain(`sluice_outbox_lag_messages{schema="${db.schema}",destination="${d}"} 0`);
      expect(text).toContain(`sluice_outbox_lag_messages{schema="${other.schema}",destination="${d}"} 3`);
    } finally {
      await mine.stop();
      await theirs.stop();
      await otherOutbox.close();
      await other.drop();
    }
  });

  // Outside review 166: a relay without its broker's client library took the
  // partitions, called the missing library a broker outage, retried for ever, and
  // kept relays that could publish from the destination.
  it('a relay whose publisher cannot load its client library fails at start, holding no partition', async () => {
    const missing = new ConfigError('The NATS relay needs the nats package, which is not installed: npm install nats');
    const broker = Object.assign(new MemoryBroker(), { prepare: () => Promise.reject(missing) });
    const relay = new OutboxRelay({ pool: db.pool, publisher: broker, destinations: ['no-client'], partitions: 2 });
    await expect(relay.start()).rejects.toBe(missing);
    const held = await db.pool.query(`SELECT count(*)::int AS n FROM ${db.s}.outbox_relays WHERE destination = 'no-client'`);
    expect(held.rows[0].n).toBe(0);
    await relay.stop();
    // The real publishers load their library in prepare() (installed here: it resolves, connecting to nothing).
    await natsPublisher({ servers: 'nats://127.0.0.1:1' }).prepare!();
    await rabbitMqPublisher({ url: 'amqp://guest:guest@127.0.0.1:1' }).prepare!();
  });

  it('rabbitMqPublisher refuses an exchange AMQP cannot carry and a URL that is not amqp:// when made (outside review 184)', () => {
    // Both were found at the first publish: every message a dead letter, or a broker outage retried for ever.
    expect(() => rabbitMqPublisher({ exchange: 'e'.repeat(256) })).toThrow(/exchange is longer than 255 bytes/);
    for (const url of ['notaurl', 'http://127.0.0.1:5672', ''])
      expect(() => rabbitMqPublisher({ url }), url).toThrow(/url must be an amqp:\/\/ or amqps:\/\/ URL/);
    expect(() => rabbitMqPublisher({ url: 'amqp://user:secret@host' })).not.toThrow();
    expect(() => rabbitMqPublisher({ url: 'http://user:secret@host' })).toThrow(/got "http:\/\/host"/);
  });

  it('a RabbitMQ relay refuses a destination longer than a routing key in bytes, though publish() took it (outside review 271)', () => {
    // 255 characters, 505 bytes: every message for it was a dead letter, "the wrong type" said amqplib.
    const destination = `d.${'é'.repeat(253)}`;
    const relay = (d: string) =>
      new OutboxRelay({ pool: db.pool, schema: db.schema, publisher: rabbitMqPublisher(), destinations: [d] });
    expect(() => relay(destination)).toThrow(
      `OutboxRelay: destination ${destination} cannot be published: a RabbitMQ routing key is at most 255 bytes, and it is 508 (in UTF-8)`,
    );
    expect(() => relay('d.' + 'e'.repeat(253))).not.toThrow();
  });

  it('publish refuses the CC and BCC headers RabbitMQ routes by (outside review 184)', async () => {
    for (const name of ['CC', 'BCC', 'cc']) {
      await expect(outbox.publish(freshDestination(), 'x', { headers: { [name]: 'q' } })).rejects.toThrow(
        new RegExp(`^publish: header ${name} is reserved \\(.*CC and BCC route RabbitMQ messages`),
      );
    }
  });

  it('publish refuses a header named __proto__, which JavaScript consumers lose (outside review 250)', async () => {
    const headers = JSON.parse('{"__proto__":"x","y":"1"}') as Record<string, string>;
    await expect(outbox.publish(freshDestination(), 'x', { headers })).rejects.toThrow(
      /^publish: header __proto__ is reserved \(.*__proto__ is lost by JavaScript consumers\)/,
    );
  });

  it('the SQL publish() refuses the headers Outbox.publish refuses, naming the fault (22023), and writes nothing', async () => {
    const d = freshDestination();
    // Review 62: stored, and then the NATS relay failed on them at every try.
    const bad: [string, RegExp][] = [
      ['{"x":"a\\r\\nb"}', /^publish: header x contains a line break$/],
      ['{"x":"a\\nb"}', /^publish: header x contains a line break$/],
      ['{"y":5}', /^publish: header y must be a string, got number$/],
      ['{"z":{"a":1}}', /^publish: header z must be a string, got object$/],
      ['{"bad name":"v"}', /^publish: header name "bad name" is not a token$/],
      ['{"a:b":"v"}', /^publish: header name "a:b" is not a token$/],
      ['{"Sluice-Key":"v"}', /^publish: header Sluice-Key is reserved/],
      ['{"nats-msg-id":"v"}', /^publish: header nats-msg-id is reserved/],
      // Review 63: JetStream's other controls (a rollup purges the subject's messages).
      ['{"Nats-Rollup":"sub"}', /^publish: header Nats-Rollup is reserved \(Nats-\* headers are JetStream's controls/],
      ['{"NATS-Expected-Stream":"x"}', /^publish: header NATS-Expected-Stream is reserved/],
      // Review 63: refused by the table's check constraint, as a raw 23514.
      ['["a","b"]', /^publish: headers must be a JSON object \(or NULL for none\), got array$/],
      ['"a"', /^publish: headers must be a JSON object \(or NULL for none\), got string$/],
      ['null', /^publish: headers must be a JSON object \(or NULL for none\), got null$/],
      // Review 96 (migration 0035).
      [
        JSON.stringify(Object.fromEntries(Array.from({ length: 101 }, (_, i) => [`h${i}`, 'v']))),
        /^publish: it has 101 headers, more than the 100 allowed$/,
      ],
      [JSON.stringify({ h: 'v'.repeat(32 * 1024) }), /^publish: its headers take 32773 bytes, more than the 32768 allowed$/],
      [JSON.stringify({ ['n'.repeat(256)]: 'v' }), /^publish: header name "n{20}…" is longer than 255 bytes$/],
    ];
    const cases: [string, string, RegExp][] = [
      ...bad.map(([headers, message]): [string, string, RegExp] => ['k', headers, message]),
      ['a\nb', '{}', /^publish: key contains a line break$/],
      ['a\rb', '{}', /^publish: key contains a line break$/],
    ];
    for (const [key, headers, message] of cases) {
      for (const payload of [`'text'`, `'{"j":1}'::jsonb`, `'\\x01'::bytea`]) {
        const err = await db.pool.query(`SELECT ${db.s}.publish($1, ${payload}, $3, $2)`, [d, headers, key]).then(
          () => undefined,
          (e: unknown) => e as { code?: string; message?: string },
        );
        expect(err?.code, `${headers} with ${payload}`).toBe('22023');
        expect(err?.message).toMatch(message);
      }
    }
    // Review 65: raw 23514 / 23502 from the table's constraints, from publish() or an INSERT.
    const rows: [string, unknown[], RegExp][] = [
      [
        `SELECT ${db.s}.publish($1, '{}'::jsonb, $2)`,
        [d, 'k'.repeat(1025)],
        /^publish: the key must be at most 1024 characters long, got 1025$/,
      ],
      [`SELECT ${db.s}.publish($1, 'p')`, [''], /^publish: the destination must be 1 to 255 characters long, got 0 characters$/],
      [`SELECT ${db.s}.publish($1, 'p')`, [null], /^publish: the destination must be 1 to 255 characters long, got NULL$/],
      [`SELECT ${db.s}.publish($1, NULL::jsonb)`, [d], /^publish: no payload \(NULL\)/],
      [`INSERT INTO ${db.s}.outbox (destination, payload) VALUES ($1, NULL)`, [d], /^publish: no payload \(NULL\)/],
      [
        `INSERT INTO ${db.s}.outbox (destination, payload, headers) VALUES ($1, 'x', '[]')`,
        [d],
        /^publish: headers must be a JSON object \(or NULL for none\), got array$/,
      ],
    ];
    for (const [sql, values, message] of rows) {
      await expect(db.pool.query(sql, values), sql).rejects.toMatchObject({
        code: '22023',
        message: expect.stringMatching(message),
      });
    }
    expect(await count('outbox', d)).toBe(0);
    await db.pool.query(`SELECT ${db.s}.publish($1, 'ok', 'k', '{"X-Trace":"a b","e":""}')`, [d]);
    expect(await count('outbox', d)).toBe(1);
  });
});
