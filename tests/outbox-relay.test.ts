import { describe, expect, it } from 'vitest';
import pg from 'pg';
import {
  Outbox,
  OutboxRelay,
  ValidationError,
  ConfigError,
  outboxLag,
  runDoctor,
  listOutboxDeadLetters,
  redriveOutboxDeadLetters,
  migrate,
  natsPublisher,
  rabbitMqPublisher,
  type RelayEventMap,
} from '../src/index.js';
import { createTestSchema, waitFor } from './helpers/database.js';
import { MemoryBroker, messageIdOf, relayMessage, useMemoryRelays } from './helpers/outbox.js';
import { runCli } from './helpers/cli.js';

const { db, outbox, startRelay, count, freshDestination, relays } = useMemoryRelays('outbox_relay');

describe('relay', () => {
  it('publishes every committed message once, in order per key, and deletes what it published', async () => {
    const d = freshDestination();
    const broker = new MemoryBroker();
    const relay = startRelay(broker, [d], { batchSize: 50 });
    await relay.start();
    const keys = ['a', 'b', 'c'];
    for (let i = 0; i < 300; i += 30) {
      await outbox.publishMany(
        Array.from({ length: 30 }, (_, j) => ({ destination: d, payload: String(i + j), key: keys[(i + j) % 3] })),
      );
    }
    await waitFor(() => broker.stored.length === 300, 'all 300 published');
    for (const [k, key] of keys.entries()) {
      const expected = Array.from({ length: 300 }, (_, n) => n)
        .filter((n) => n % 3 === k)
        .map(String);
      expect(broker.ofKey(key)).toEqual(expected);
    }
    expect(broker.duplicates).toBe(0);
    await waitFor(async () => (await count('outbox', d)) === 0, 'published messages deleted');
    const [lag] = (await outboxLag(db.pool, db.schema)).filter((l) => l.destination === d);
    expect(lag).toMatchObject({ destination: d, waiting: 0, published: 300, relaysHolding: 1, deadLetters: 0 });
  });

  it('never passes a message whose transaction commits after a later one (ids commit out of order)', async () => {
    const d = freshDestination();
    const broker = new MemoryBroker();
    const relay = startRelay(broker, [d]);
    await relay.start();
    const early = await db.pool.connect();
    try {
      await early.query('BEGIN');
      const earlyId = await outbox.publish(d, 'early', { tx: early, key: 'k' });
      const lateId = await outbox.publish(d, 'late', { key: 'other' });
      expect(Number(lateId)).toBeGreaterThan(Number(earlyId));
      // The relay looks, sees the committed later message, and holds it back behind the open transaction.
      await new Promise<void>((resolve) => {
        const seen = (e: RelayEventMap['caughtUp'][0]) => {
          if (e.destination !== d || !e.behindHorizon) return;
          relay.events.off('caughtUp', seen);
          resolve();
        };
        relay.events.on('caughtUp', seen);
      });
      expect(broker.stored).toHaveLength(0);
      await early.query('COMMIT');
    } finally {
      early.release();
    }
    await waitFor(() => broker.stored.length === 2, 'both published');
    expect(broker.stored.map((m) => m.payload.toString())).toEqual(['early', 'late']);
  });

  it('its own clean-up transaction does not hold the horizon: messages go out while a DELETE of published ones is stuck', async () => {
    const d = freshDestination();
    const broker = new MemoryBroker();
    const relay = startRelay(broker, [d]);
    // The clean-up's DELETE waits on an advisory lock this session holds (which takes no txid,
    // so the only running transaction is the relay's clean-up, with its txid).
    const key = 917_001;
    const blocker = await db.pool.connect();
    await blocker.query('SELECT pg_advisory_lock($1)', [key]);
    await db.pool.query(`CREATE FUNCTION ${db.s}.stall_cleanup() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN PERFORM pg_advisory_xact_lock_shared(${key}); RETURN NULL; END $$`);
    await db.pool.query(
      `CREATE TRIGGER stall_cleanup BEFORE DELETE ON ${db.s}.outbox FOR EACH STATEMENT EXECUTE FUNCTION ${db.s}.stall_cleanup()`,
    );
    try {
      await outbox.publish(d, 'first', { key: 'k' });
      await relay.start();
      await waitFor(() => broker.stored.length === 1, 'the first message published');
      await waitFor(
        async () =>
          (
            await db.pool.query(
              `SELECT 1 FROM pg_locks l JOIN pg_stat_activity a USING (pid)
               WHERE l.locktype = 'advisory' AND l.objid = $1 AND NOT l.granted AND a.backend_xid IS NOT NULL`,
              [key],
            )
          ).rows.length === 1,
        'the clean-up stuck in its DELETE, with a txid',
      );
      await outbox.publishMany(['second', 'third'].map((p) => ({ destination: d, payload: p, key: 'k' })));
      // Before the fix this waited for the DELETE to end, i.e. for ever here.
      await waitFor(() => broker.stored.length === 3, 'the later messages published during the stuck clean-up');
      expect(broker.ofKey('k')).toEqual(['first', 'second', 'third']);
    } finally {
      await blocker.query('SELECT pg_advisory_unlock($1)', [key]);
      blocker.release();
    }
    await waitFor(async () => (await count('outbox', d)) === 0, 'the clean-up done once released');
    await db.pool.query(`DROP TRIGGER stall_cleanup ON ${db.s}.outbox`);
    await db.pool.query(`DROP FUNCTION ${db.s}.stall_cleanup()`);
  });

  it('retries a broker that is down without counting it against the message', async () => {
    const d = freshDestination();
    const broker = new MemoryBroker();
    let downFor = 3;
    broker.down = () => downFor-- > 0;
    const failures: RelayEventMap['failure'][0][] = [];
    const relay = startRelay(broker, [d], { maxAttempts: 2 });
    relay.events.on('failure', (f) => failures.push(f));
    await relay.start();
    await outbox.publishMany(['1', '2', '3'].map((p) => ({ destination: d, payload: p, key: 'k' })));
    await waitFor(() => broker.stored.length === 3, 'published after the broker came back');
    expect(broker.ofKey('k')).toEqual(['1', '2', '3']);
    expect(failures.length).toBeGreaterThanOrEqual(2);
    expect(failures.every((f) => f.transient)).toBe(true);
    expect(await count('outbox_dead_letters', d)).toBe(0);
  });

  it('keeps its backoff while the broker is down, however many messages commit meanwhile', async () => {
    const d = freshDestination();
    const broker = new MemoryBroker();
    let tries = 0;
    let down = true;
    broker.down = () => (tries++, down);
    // Polls only after 10 s: every early try is the backoff's, or a wake-up's.
    const relay = startRelay(broker, [d], { retry: { minMs: 300, maxMs: 600 }, pollIntervalMs: 10_000 });
    await relay.start();
    // 30 commits, one at a time over about 1.5 s: each wakes the relay (review 46: each was a try).
    for (let i = 0; i < 30; i++) {
      await outbox.publish(d, String(i), { key: 'k' });
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    // At most one try per backoff delay (300-600 ms, with jitter from 150 ms) after the first.
    expect(tries).toBeLessThanOrEqual(12);
    down = false;
    await waitFor(() => broker.stored.length === 30, 'all published once the broker is back');
    expect(broker.ofKey('k')).toEqual(Array.from({ length: 30 }, (_, i) => String(i)));
  });

  it('moves a message refused maxAttempts times to the dead letters, and its key goes on', async () => {
    const d = freshDestination();
    const broker = new MemoryBroker();
    broker.refuse = (m) => m.payload.toString() === 'poison';
    const relay = startRelay(broker, [d], { maxAttempts: 3 });
    const dead: string[] = [];
    relay.events.on('deadLetter', (x) => dead.push(x.messageId));
    await relay.start();
    const ids = await outbox.publishMany(['before', 'poison', 'after'].map((p) => ({ destination: d, payload: p, key: 'k' })));
    await waitFor(() => dead.length === 1, 'the poison message dead-lettered');
    await waitFor(() => broker.stored.length === 2, 'the rest of the key published');
    expect(broker.ofKey('k')).toEqual(['before', 'after']);
    const poison = await messageIdOf(db, ids[1]!);
    expect(broker.attempts.get(poison)).toBe(3);
    expect(dead).toEqual([poison]);
    const { rows } = await db.pool.query(
      `SELECT id, attempts, last_error, convert_from(payload, 'UTF8') AS body FROM ${db.s}.outbox_dead_letters WHERE destination = $1`,
      [d],
    );
    expect(rows).toEqual([{ id: ids[1], attempts: 3, last_error: `refused ${poison}`, body: 'poison' }]);
    expect(await count('outbox_failures', d)).toBe(0);
    const check = (await runDoctor({ pool: db.pool, schema: db.schema })).checks.find((c) => c.id === 'outbox_lag');
    expect(check?.status).toBe('warn');
    expect(check?.summary).toContain(`${d}: 0 waiting`);
    expect(check?.summary).toContain('1 dead letters');

    // Review 46: dead letters can be listed, and sent again once the broker takes them.
    expect(await listOutboxDeadLetters(db.pool, db.schema, { destinations: [d] })).toEqual([
      expect.objectContaining({
        id: ids[1],
        destination: d,
        key: 'k',
        bytes: 6,
        attempts: 3,
        lastError: `refused ${poison}`,
      }),
    ]);
    await expect(redriveOutboxDeadLetters(db.pool, db.schema, {})).rejects.toThrow(/give \{ destinations \}/);
    // Both: every dead letter was redriven (outside review 173). And the ids are the outbox's, not jobs'.
    await expect(redriveOutboxDeadLetters(db.pool, db.schema, { ids: [ids[1]!], all: true } as never)).rejects.toThrow(
      /not \{ all \} beside the others/,
    );
    await expect(redriveOutboxDeadLetters(db.pool, db.schema, { ids: ['abc'] })).rejects.toThrow(
      'not an outbox message id: "abc"',
    );
    await expect(outboxLag(db.pool, 'no_such_schema_here')).rejects.toThrow(/outboxLag.*run `sluice migrate`/);
    await expect(redriveOutboxDeadLetters(db.pool, db.schema, { destination: [d] } as never)).rejects.toThrow(ValidationError);
    const listed = await runCli(db.url, db.schema, ['relay', '--dead-letters', '--destination', d, '--json']);
    expect(listed.code).toBe(0);
    expect(JSON.parse(listed.stdout.trim())).toMatchObject({ event: 'dead_letter', id: ids[1], attempts: 3 });
    broker.refuse = () => false;
    const redriven = await runCli(db.url, db.schema, ['relay', '--redrive', '--destination', d]);
    expect(redriven.stdout).toMatch(/redriven count=1/);
    await waitFor(() => broker.stored.length === 3, 'the redriven message published');
    expect(broker.ofKey('k')).toEqual(['before', 'after', 'poison']);
    expect(await listOutboxDeadLetters(db.pool, db.schema, { destinations: [d] })).toEqual([]);
    const after = (await runDoctor({ pool: db.pool, schema: db.schema })).checks.find((c) => c.id === 'outbox_lag');
    expect(after?.status).toBe('ok');
  });

  /** A destination a relay has started on and left, with `payload` published to it since. */
  async function stranded(payload: string): Promise<string> {
    const d = freshDestination();
    const relay = startRelay(new MemoryBroker(), [d]);
    await relay.start();
    await waitFor(() => relay.holding.length === 1, 'the relay holds the partition');
    await relay.stop();
    await outbox.publish(d, payload);
    return d;
  }

  it('doctor: messages waiting with no relay holding their destination are critical', async () => {
    const d = await stranded('stranded');
    const check = (await runDoctor({ pool: db.pool, schema: db.schema })).checks.find((c) => c.id === 'outbox_lag');
    expect(check?.status).toBe('critical');
    expect(check?.summary).toContain(`${d}: 1 waiting`);
    expect(check?.summary).toContain('0/1 partitions held');
    expect(check?.advice).toMatch(/start `sluice relay`/);
  });

  it('sluice relay --dead-letters prints a key with a line break quoted, one entry per line', async () => {
    const d = freshDestination();
    // Only a row written past publish() can hold such a key (publish refuses it).
    await db.pool.query(
      `INSERT INTO ${db.s}.outbox_dead_letters (id, txid, destination, key, payload, created_at, attempts, last_error)
       VALUES (-1, pg_current_xact_id(), $1, E'K4\nx', '\\x00', now(), 1, 'refused')`,
      [d],
    );
    try {
      const listed = await runCli(db.url, db.schema, ['relay', '--dead-letters', '--destination', d]);
      expect(listed.code).toBe(0);
      const lines = listed.stdout.trim().split('\n');
      expect(lines).toHaveLength(1);
      expect(lines[0]).toContain('key="K4\\nx"');
    } finally {
      await db.pool.query(`DELETE FROM ${db.s}.outbox_dead_letters WHERE id = -1`);
    }
  });

  it('doctor: a destination behind names the oldest write transaction on the server (any database)', async () => {
    const d = await stranded('late');
    await db.pool.query(`UPDATE ${db.s}.outbox SET created_at = now() - interval '2 minutes' WHERE destination = $1`, [d]);
    // A write transaction left open: some writer (this one, or an older one of a parallel test file) is named.
    const holder = new pg.Client({ connectionString: db.url, application_name: 'outbox-holder' });
    await holder.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT pg_current_xact_id()');
      const check = (await runDoctor({ pool: db.pool, schema: db.schema })).checks.find((c) => c.id === 'outbox_lag');
      expect(check?.status).toBe('critical');
      expect(check?.summary).toMatch(/; oldest write transaction on the server: pid \d+ in database \S+ \(.+\), open /);
      expect(check?.advice).toMatch(/in any database/);
    } finally {
      await holder.query('ROLLBACK');
      await holder.end();
    }
  });

  it('splits keys over partitions held by two relays; a stopped relay hands its partitions over; the count changes once none runs', async () => {
    const d = freshDestination();
    const broker = new MemoryBroker();
    // Leases of 3 s: at 1 s a CI machine's Postgres, busy with the other test files, let one
    // run out between renewals, and the relay taking it over sent a batch again (deduplicated
    // by a real broker; counted here).
    const a = startRelay(broker, [d], { partitions: 4, maxPartitions: 2, leaseMs: 3_000, relayId: 'relay-a' });
    const b = startRelay(broker, [d], { partitions: 4, maxPartitions: 4, leaseMs: 3_000, relayId: 'relay-b' });
    await a.start();
    await waitFor(() => a.holding.length === 2, 'a holds two partitions');
    await b.start();
    await waitFor(() => b.holding.length === 2, 'b holds the other two');
    const keys = Array.from({ length: 20 }, (_, i) => `key-${i}`);
    const publishRound = (round: number) =>
      outbox.publishMany(keys.map((key) => ({ destination: d, payload: `${key}:${round}`, key })));
    for (let round = 0; round < 5; round++) await publishRound(round);
    await waitFor(() => broker.stored.length === 100, 'rounds 0-4 published');
    await a.stop();
    await waitFor(() => b.holding.length === 4, 'b took over all four partitions');
    for (let round = 5; round < 10; round++) await publishRound(round);
    await waitFor(() => broker.stored.length === 200, 'rounds 5-9 published');
    for (const key of keys) expect(broker.ofKey(key)).toEqual(Array.from({ length: 10 }, (_, r) => `${key}:${r}`));
    await expect(startRelay(broker, [d], { partitions: 3 }).start()).rejects.toThrow(
      /relayed with 4 partitions, not 3, and the count cannot change now: a relay holds 4 of its partitions/,
    );
    // Review 46: with every relay stopped and nothing waiting, the count changes.
    await b.stop();
    await publishRound(10);
    await expect(startRelay(broker, [d], { partitions: 3 }).start()).rejects.toThrow(/20 of its messages are not published yet/);
    const c = startRelay(broker, [d], { partitions: 4 });
    await c.start();
    await waitFor(() => broker.stored.length === 220, 'round 10 published');
    // Recorded too: a relay stopped with a batch's acks still out leaves it unrecorded, to
    // be sent again (as documented), and the count could not change below.
    const publishedBy = async (relay: typeof c) => (await relay.lag()).find((l) => l.destination === d)?.published;
    await waitFor(async () => (await publishedBy(c)) === 220, 'round 10 recorded');
    await c.stop();
    const three = startRelay(broker, [d], { partitions: 3 });
    await three.start();
    await waitFor(() => three.holding.length === 3, 'the new layout held');
    for (let round = 11; round < 13; round++) await publishRound(round);
    await waitFor(() => broker.stored.length === 260, 'rounds 11-12 published on three partitions');
    for (const key of keys) expect(broker.ofKey(key)).toEqual(Array.from({ length: 13 }, (_, r) => `${key}:${r}`));
    expect(broker.duplicates).toBe(0);
    // The destination's count goes on across the change (review 48: it started over). It is
    // recorded after the broker's acks, so a moment after the last message arrives.
    await waitFor(async () => (await publishedBy(three)) === 260, 'the last batch recorded');
    expect((await three.lag()).find((l) => l.destination === d)).toMatchObject({ published: 260, partitions: 3 });
  });

  it('reports a schema without the outbox as a ConfigError', async () => {
    const relay = startRelay(new MemoryBroker(), ['x'], { schema: 'no_such_schema_outbox' });
    await expect(relay.start()).rejects.toThrow(/run sluice migrate/);
  });

  // Many runs of the CLI: on a loaded machine (a full suite beside two outside reviews) they took over 60 s.
  it('sluice relay: --status prints the lag of every destination; no destination is a usage error', async () => {
    const d = freshDestination();
    const relay = startRelay(new MemoryBroker(), [d]);
    await relay.start();
    await relay.stop();
    await outbox.publish(d, 'waiting');
    const status = await runCli(db.url, db.schema, ['relay', '--status', '--json']);
    expect(status.code).toBe(0);
    const lines = status.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines.find((l) => l.destination === d)).toMatchObject({ event: 'lag', waiting: 1, partitions: 1, relaysHolding: 0 });
    const usage = await runCli(db.url, db.schema, ['relay']);
    expect(usage.code).toBe(2);
    expect(usage.stderr).toContain('give at least one --destination');
    // Review 62: the second action was silently skipped.
    for (const both of [
      ['--redrive', '--drop-dead-letters'],
      ['--status', '--dead-letters'],
    ]) {
      const conflict = await runCli(db.url, db.schema, ['relay', ...both, '--destination', d]);
      expect(conflict.code).toBe(2);
      expect(conflict.stderr).toContain(`${both.join(' and ')} are separate actions: give one of them`);
    }
    // Outside review 166: --status took no filter, a misspelt destination was redriven
    // "0" with exit 0, and the other broker's options were taken without a word.
    const filtered = await runCli(db.url, db.schema, ['relay', '--status', '--json', '--destination', d]);
    expect(
      filtered.stdout
        .trim()
        .split('\n')
        .map((l) => (JSON.parse(l) as { destination: string }).destination),
    ).toEqual([d]);
    const unknownStatus = await runCli(db.url, db.schema, ['relay', '--status', '--destination', `${d}-typo`]);
    expect(unknownStatus.stdout).toContain(`no relay has started on destination ${d}-typo yet`);
    // Beside a known one, the unknown one is named too, not left out (outside review 251).
    const mixed = await runCli(db.url, db.schema, ['relay', '--status', '--destination', d, '--destination', `${d}-typo`]);
    expect(mixed.stdout).toContain(`destination=${d} `);
    expect(mixed.stdout).toContain(`no relay has started on destination ${d}-typo yet`);
    for (const action of ['--redrive', '--drop-dead-letters']) {
      const typo = await runCli(db.url, db.schema, ['relay', action, '--destination', `${d}-typo`]);
      expect(typo.code).toBe(2);
      expect(typo.stderr).toContain(`no relay has ever run destination ${d}-typo`);
    }
    const known = await runCli(db.url, db.schema, ['relay', '--redrive', '--destination', d]);
    expect(known.code).toBe(0);
    for (const [broker, flag] of [
      ['rabbitmq', '--subject-prefix'],
      ['nats', '--exchange'],
    ]) {
      const wrong = await runCli(db.url, db.schema, ['relay', '--broker', broker!, flag!, 'x', '--destination', d]);
      expect(wrong.code).toBe(2);
      expect(wrong.stderr).toContain(`${flag} is not for --broker ${broker}`);
    }
    // Every --nats-url counts, and a comma-separated list too: a repeated one kept only the last (outside review 248).
    for (const urls of [
      ['--nats-url', 'http://x', '--nats-url', 'nats://127.0.0.1:4222'],
      ['--nats-url', 'nats://127.0.0.1:4222,http://x'],
    ]) {
      const listed = await runCli(db.url, db.schema, ['relay', '--destination', d, ...urls]);
      expect(listed.code, listed.stderr).toBe(2);
      expect(listed.stderr).toContain('"http://x" is not a NATS URL');
    }
    // What only relaying uses, given to an action: refused, not ignored with exit 0 (outside review 247).
    for (const [action, extra] of [
      ['--status', ['--partitions', '3']],
      ['--dead-letters', ['--batch-size', '5']],
      ['--redrive', ['--broker', 'rabbitmq']],
    ] as const) {
      const ignored = await runCli(db.url, db.schema, ['relay', action, '--destination', d, ...extra]);
      expect(ignored.code, ignored.stderr).toBe(2);
      expect(ignored.stderr).toContain(`${extra[0]} is not for ${action}`);
    }
    // A schema no relay has started on says so rather than printing nothing.
    const empty = await createTestSchema('relaynone');
    try {
      const none = await runCli(empty.url, empty.schema, ['relay', '--status']);
      expect(none.code).toBe(0);
      expect(none.stdout).toContain('no-destinations');
    } finally {
      await empty.drop();
    }
  }, 180_000);
});

describe('relay: set-up and refusals', () => {
  it('message ids carry the outbox identity: a schema made again does not reuse the ids JetStream saw (0031)', async () => {
    // The MemoryBroker drops a message id it has seen, as JetStream does within its window.
    const broker = new MemoryBroker();
    const schema = `t_outbox_again_${process.pid}`;
    const round = async (payload: string) => {
      await db.pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await migrate({ pool: db.pool, schema });
      const mine = new Outbox({ pool: db.pool, schema });
      await mine.publish('again', payload);
      const relay = new OutboxRelay({ pool: db.pool, schema, publisher: broker, destinations: ['again'], pollIntervalMs: 50 });
      relays.push(relay);
      await relay.start();
      await waitFor(() => broker.stored.some((m) => m.payload.toString() === payload), `${payload} published`);
      await relay.stop();
      await mine.close();
    };
    try {
      await round('first');
      await round('second');
      expect(broker.duplicates).toBe(0);
      expect(broker.stored.map((m) => m.payload.toString())).toEqual(['first', 'second']);
      // Both rows had id 1 in their schema; the ids differ by the identity.
      expect(new Set(broker.stored.map((m) => m.messageId)).size).toBe(2);
      expect(broker.stored.every((m) => m.messageId.startsWith(`${schema}:`) && m.messageId.endsWith(':1'))).toBe(true);
    } finally {
      await db.pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    }
  });

  it('fills in a retry bound given alone, and retries after a broker error with it', async () => {
    const only = (retry: object) => startRelay(new MemoryBroker(), [freshDestination()], { retry }).options.retry;
    expect(only({ minMs: 100 })).toEqual({ minMs: 100, maxMs: 30_000 });
    expect(only({ maxMs: 50 })).toEqual({ minMs: 50, maxMs: 50 });
    expect(only({ maxMs: 5_000 })).toEqual({ minMs: 200, maxMs: 5_000 });
    expect(() => only({ minMs: 10, max: 5 })).toThrow(ConfigError);
    // Before: maxMs undefined made the backoff NaN, and the relay never tried again.
    const d = freshDestination();
    const broker = new MemoryBroker();
    let down = 3;
    broker.down = () => down-- > 0;
    const relay = startRelay(broker, [d], { retry: { minMs: 5 } });
    await relay.start();
    await outbox.publish(d, 'after the outage');
    await waitFor(() => broker.stored.length === 1, 'published once the broker is back');
  });

  it('relays started at once with different partition counts: one layout, and a relay left out of it says so', async () => {
    for (let i = 0; i < 5; i++) {
      const d = freshDestination();
      const errors = new Map<number, Error[]>([
        [2, []],
        [4, []],
      ]);
      const relay = (partitions: number) => {
        const r = startRelay(new MemoryBroker(), [d], { partitions, leaseMs: 1_000 });
        r.events.on('error', (err) => errors.get(partitions)!.push(err));
        return r;
      };
      const started = await Promise.allSettled([relay(2).start(), relay(4).start()]);
      // Before: both checks passed, and some partitions had each count (messages published twice).
      const { rows } = await db.pool.query<{ partitions: number }>(
        `SELECT DISTINCT partitions FROM ${db.s}.outbox_relays WHERE destination = $1`,
        [d],
      );
      expect(rows, `round ${i}`).toHaveLength(1);
      const layout = rows[0]!.partitions;
      const other = layout === 2 ? 4 : 2;
      const otherStarted = started[other === 2 ? 0 : 1]!;
      if (otherStarted.status === 'rejected') {
        expect(otherStarted.reason).toBeInstanceOf(ConfigError);
      } else {
        // Started first, then the layout changed under it: it says so instead of idling in silence.
        await waitFor(
          () => errors.get(other)!.some((e) => e instanceof ConfigError && /is now relayed with/.test(e.message)),
          `round ${i}: the relay of ${other} partitions reporting the change`,
        );
      }
      expect(errors.get(layout)).toEqual([]);
      await Promise.all(relays.splice(0).map((r) => r.stop()));
    }
  });

  it('a failure row goes when its message is published by another relay and deleted (doctor no longer warns)', async () => {
    const d = freshDestination();
    const refusing = new MemoryBroker();
    refusing.refuse = () => true;
    const first = startRelay(refusing, [d], { maxAttempts: 100 });
    await first.start();
    await outbox.publish(d, 'refused at first');
    await waitFor(async () => (await count('outbox_failures', d)) === 1, 'a failure recorded');
    await first.stop();
    const taking = new MemoryBroker();
    await startRelay(taking, [d]).start();
    await waitFor(() => taking.stored.length === 1, 'published by the second relay');
    await waitFor(async () => (await count('outbox', d)) === 0, 'the published message deleted');
    await waitFor(async () => (await count('outbox_failures', d)) === 0, 'its failure row gone with it');
  });

  it('refuses invalid input up front: an invalid Date payload, a destination that is no NATS subject, publisher option typos', async () => {
    await expect(outbox.publish(freshDestination(), new Date('x') as never)).rejects.toThrow(/invalid Date/);
    await expect(outbox.publish(freshDestination(), { at: new Date(Number.NaN) })).rejects.toBeInstanceOf(ValidationError);
    const nats = natsPublisher({ subjectPrefix: 'p.' });
    for (const destination of ['orders.*', 'orders.>', 'bad subject', 'a..b']) {
      expect(
        () => new OutboxRelay({ pool: db.pool, schema: db.schema, publisher: nats, destinations: [destination] }),
        destination,
      ).toThrow(/is not a NATS subject/);
    }
    expect(() => natsPublisher({ server: 'nats://x' } as never)).toThrow(/natsPublisher: unknown option "server"/);
    expect(() => natsPublisher({ ackTimeoutMs: -1 })).toThrow(ConfigError);
    expect(() => natsPublisher({ servers: 5 } as never)).toThrow(ConfigError);
    expect(() => natsPublisher({ servers: [] })).toThrow(ConfigError);
    // Never connectable: refused at once, not retried as an outage for ever (outside review 247).
    expect(() => natsPublisher({ servers: 'http://[bad' })).toThrow(
      'natsPublisher: servers: "http://[bad" is not a NATS URL: the scheme must be nats:// or tls://',
    );
    expect(() => natsPublisher({ servers: ['nats://127.0.0.1:4222', 'nats://127.0.0.1:notaport'] })).toThrow(
      'natsPublisher: servers: "nats://127.0.0.1:notaport" is not a URL',
    );
    // Never reachable, or dropped by nats.js without a word (outside review 248).
    expect(() => natsPublisher({ servers: 'nats://127.0.0.1:0' })).toThrow(/port 0 is no port to connect to/);
    for (const dropped of ['nats://h:4222/path', 'nats://h:4222?x=1', 'nats://h:4222#f']) {
      expect(() => natsPublisher({ servers: dropped })).toThrow(/has a path, query or fragment/);
    }
    for (const good of [
      '127.0.0.1:4222',
      'localhost',
      'tls://nats.example:4443',
      'nats://u:p@[::1]:4222',
      'nats://nosuchhost.invalid:4222',
    ]) {
      expect(() => natsPublisher({ servers: good })).not.toThrow();
    }
    expect(() => natsPublisher({ servers: '' })).toThrow(ConfigError);
    expect(() => natsPublisher({ servers: ['  '] })).toThrow(ConfigError);
    expect(() => rabbitMqPublisher({ urll: 'amqp://x' } as never)).toThrow(/rabbitMqPublisher: unknown option "urll"/);
    expect(() => rabbitMqPublisher({ confirmTimeoutMs: 0 })).toThrow(ConfigError);
    expect(() => rabbitMqPublisher({ keyHeader: 5 } as never)).toThrow(ConfigError);
    // Review 77: a Nats-Rollup key header purged the subject with every keyed message.
    for (const keyHeader of ['Nats-Rollup', 'nats-msg-id', 'a b', 'a:b', ''])
      expect(() => natsPublisher({ keyHeader }), keyHeader).toThrow(/natsPublisher: keyHeader/);
    // An AMQP field name is at most 255 bytes: longer, every keyed message failed (outside review 152).
    expect(() => rabbitMqPublisher({ keyHeader: 'h'.repeat(256) })).toThrow(
      /rabbitMqPublisher: keyHeader .* longer than 255 bytes/,
    );
    expect(() => rabbitMqPublisher({ keyHeader: 'h'.repeat(255) })).not.toThrow();
    expect(() => natsPublisher({ keyHeader: 'X-Key' })).not.toThrow();
    expect(() => natsPublisher({ keyHeader: null })).not.toThrow();
  });

  it('names the NATS servers it cannot reach in the failure, without their password (outside review 95)', async () => {
    // Port 1: nothing listens, so the connect is refused at once (no broker needed).
    const nats = natsPublisher({ servers: ['nats://relay:s3cret@127.0.0.1:1', 'nats://127.0.0.1:2'], ackTimeoutMs: 2_000 });
    try {
      const [result] = await nats.publish([relayMessage()]);
      expect(result).toMatchObject({ ok: false, transient: true });
      const { message: text } = (result as { error: Error }).error;
      expect(text).toMatch(/^cannot reach NATS at nats:\/\/127\.0\.0\.1:1, nats:\/\/127\.0\.0\.1:2: /);
      expect(text).not.toContain('s3cret');
    } finally {
      await nats.close();
    }
  });
});
