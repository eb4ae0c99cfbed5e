import { describe, expect, it } from 'vitest';
import { Outbox, ValidationError, ConfigError } from '../src/index.js';
import { createTestSchema, waitFor } from './helpers/database.js';
import { MemoryBroker, useMemoryRelays } from './helpers/outbox.js';

const { db, outbox, startRelay, count, freshDestination } = useMemoryRelays('outbox_order');

describe('relay: commit order per key', () => {
  /** Relays destination d into a broker of its own until it holds `count` messages; key's payloads in the order relayed. */
  async function relayedOfKey(d: string, count: number, key: string): Promise<string[]> {
    const broker = new MemoryBroker();
    await startRelay(broker, [d]).start();
    await waitFor(() => broker.stored.length === count, `all ${count} published`);
    return broker.ofKey(key);
  }

  /**
   * Producers that overlap on one key: each transaction bumps the key's version in
   * a row (a row lock, taken after the transaction has its id when it does not lock
   * the key first) and publishes it. Returns the versions in the order relayed.
   */
  async function relayedVersions(o: { table: string; producers: number; lockKeys: boolean }): Promise<number[]> {
    const d = freshDestination();
    await db.pool.query(`CREATE TABLE ${db.s}.${o.table} (id text PRIMARY KEY, version int NOT NULL)`);
    await db.pool.query(`INSERT INTO ${db.s}.${o.table} VALUES ('order-1', 0)`);
    const producer = async () => {
      for (let i = 0; i < 40; i++) {
        const client = await db.pool.connect();
        try {
          await client.query('BEGIN');
          if (o.lockKeys) await outbox.lockKeys('order-1', { tx: client });
          const { rows } = await client.query<{ version: number }>(
            `UPDATE ${db.s}.${o.table} SET version = version + 1 WHERE id = 'order-1' RETURNING version`,
          );
          await outbox.publish(d, { version: rows[0]!.version }, { tx: client, key: 'order-1' });
          await client.query('COMMIT');
        } finally {
          client.release();
        }
      }
    };
    await Promise.all(Array.from({ length: o.producers }, producer));
    const relayed = await relayedOfKey(d, 40 * o.producers, 'order-1');
    return relayed.map((p) => (JSON.parse(p) as { version: number }).version);
  }

  it('keeps commit order within a key for overlapping producers that lock the key before writing (lockKeys; outside review 77)', async () => {
    // A row lock alone did not do it before migration 0039 (see the next test):
    // lockKeys takes an advisory lock, which takes no transaction id, so the id comes after it.
    const versions = await relayedVersions({ table: 'advisory_orders', producers: 6, lockKeys: true });
    expect(versions).toEqual(Array.from({ length: 240 }, (_, i) => i + 1));
  });

  it('keeps commit order within a key for overlapping producers that lock only the row, not the key (migration 0039)', async () => {
    // A transaction takes its id when it first writes, before it waits for the
    // row, so ids come in no set order; the order is fixed at COMMIT instead.
    const versions = await relayedVersions({ table: 'row_orders', producers: 8, lockKeys: false });
    expect(versions).toEqual(Array.from({ length: 320 }, (_, i) => i + 1));
  });

  it('keeps commit order for each key of bulk publishes that list their keys in different orders, without deadlock (migration 0039)', async () => {
    const d = freshDestination();
    await db.pool.query(`CREATE TABLE ${db.s}.pair_orders (id text PRIMARY KEY, version int NOT NULL)`);
    await db.pool.query(`INSERT INTO ${db.s}.pair_orders VALUES ('k1', 0), ('k2', 0)`);
    const producer = async (p: number) => {
      for (let i = 0; i < 30; i++) {
        // One message per key (a few: looked up one by one) or five (many: one join).
        const parts = i % 2 === 0 ? 1 : 5;
        const client = await db.pool.connect();
        try {
          await client.query('BEGIN');
          const { rows } = await client.query<{ id: string; version: number }>(
            `UPDATE ${db.s}.pair_orders SET version = version + 1 RETURNING id, version`,
          );
          const messages = rows.flatMap((r) =>
            Array.from({ length: parts }, (_, part) => ({ destination: d, key: r.id, payload: { version: r.version, part } })),
          );
          if (p % 2 === 1) messages.reverse();
          // A message without a key in between: it asks for no order and changes none.
          await outbox.publishMany([...messages.slice(0, 1), { destination: d, payload: 'free' }, ...messages.slice(1)], {
            tx: client,
          });
          await client.query('COMMIT');
        } finally {
          client.release();
        }
      }
    };
    await Promise.all(Array.from({ length: 6 }, (_, p) => producer(p)));
    const broker = new MemoryBroker();
    await startRelay(broker, [d]).start();
    // 6 producers x 30 transactions: 15 with 2 + 1 messages, 15 with 10 + 1.
    await waitFor(() => broker.stored.length === 6 * 15 * 14, 'all published');
    for (const key of ['k1', 'k2']) {
      const got = broker.ofKey(key).map((p) => JSON.parse(p) as { version: number; part: number });
      expect(got.length, key).toBe(6 * 15 * 6);
      const sorted = [...got].sort((a, b) => a.version - b.version || a.part - b.part);
      // Versions in order; within one transaction a key's messages keep their own
      // order, which the reversed producers wrote backwards.
      expect(
        got.map((m) => m.version),
        key,
      ).toEqual(sorted.map((m) => m.version));
    }
  });

  it('puts a transaction that took its id first after the one that committed first, across savepoints and immediate constraints (migration 0039)', async () => {
    const d = freshDestination();
    const [early, late] = await Promise.all([db.pool.connect(), db.pool.connect()]);
    const commitLate = async (payload: string) => {
      await late.query('BEGIN');
      await outbox.publish(d, payload, { tx: late, key: 'k' });
      await late.query('COMMIT');
    };
    try {
      for (const immediate of [false, true]) {
        await early.query('BEGIN');
        await early.query('SELECT pg_current_xact_id()');
        await commitLate(`${immediate}:a1`);
        // Immediate: each statement puts its messages in order at its end and
        // holds the key's lock from there on, so no producer of the key can commit
        // in between; the later statements' messages must still follow.
        if (immediate) await early.query('SET CONSTRAINTS ALL IMMEDIATE');
        await early.query('SAVEPOINT s1');
        await outbox.publish(d, `${immediate}:gone`, { tx: early, key: 'k' });
        await early.query('ROLLBACK TO SAVEPOINT s1');
        await early.query('SAVEPOINT s2');
        await outbox.publish(d, `${immediate}:b1`, { tx: early, key: 'k' });
        await early.query('RELEASE SAVEPOINT s2');
        await outbox.publish(d, `${immediate}:b2`, { tx: early, key: 'k' });
        await outbox.publish(d, `${immediate}:free`, { tx: early });
        if (!immediate) await commitLate(`${immediate}:a2`);
        await outbox.publish(d, `${immediate}:b3`, { tx: early, key: 'k' });
        await early.query('COMMIT');
      }
    } finally {
      await early.query('ROLLBACK');
      early.release();
      late.release();
    }
    expect(await relayedOfKey(d, 11, 'k')).toEqual([
      'false:a1',
      'false:a2',
      'false:b1',
      'false:b2',
      'false:b3',
      'true:a1',
      'true:b1',
      'true:b2',
      'true:b3',
    ]);
  });

  it("runs the ordering step after the transaction's own deferred checks, so they cannot deadlock with another COMMIT (outside review 138)", async () => {
    // T1 publishes, then writes a child row whose deferred foreign key check waits
    // at COMMIT for the parent row T2 holds; T2 has published the same key and
    // commits next. With the step holding T1's key lock while its check waited,
    // T2's COMMIT waited for that lock: deadlock (40P01) after deadlock_timeout.
    const d = freshDestination();
    await db.pool.query(`CREATE TABLE ${db.s}.parents (id int PRIMARY KEY)`);
    await db.pool.query(`CREATE TABLE ${db.s}.children (parent int REFERENCES ${db.s}.parents DEFERRABLE INITIALLY DEFERRED)`);
    await db.pool.query(`INSERT INTO ${db.s}.parents VALUES (1)`);
    const [t1, t2] = await Promise.all([db.pool.connect(), db.pool.connect()]);
    try {
      await t1.query('BEGIN');
      await outbox.publish(d, 't1', { tx: t1, key: 'k' });
      await t1.query(`INSERT INTO ${db.s}.children VALUES (1)`);
      await t2.query('BEGIN');
      await t2.query(`SELECT FROM ${db.s}.parents WHERE id = 1 FOR UPDATE`);
      await outbox.publish(d, 't2', { tx: t2, key: 'k' });
      const first = t1.query('COMMIT');
      // T1's COMMIT is waiting for the parent row (its check runs before the step).
      await waitFor(
        async () =>
          (
            await db.pool.query(
              `SELECT 1 FROM pg_stat_activity WHERE query = 'COMMIT' AND wait_event_type = 'Lock' AND pid = $1`,
              [(t1 as unknown as { processID: number }).processID],
            )
          ).rows.length === 1,
        "T1's COMMIT waiting",
      );
      await t2.query('COMMIT');
      await first;
    } finally {
      t1.release();
      t2.release();
    }
    expect(await relayedOfKey(d, 2, 'k')).toEqual(['t2', 't1']);
  });

  it('lets SET CONSTRAINTS ALL IMMEDIATE leave the ordering step at COMMIT, by name (outside review 138)', async () => {
    // Immediate, the step runs at each statement's end and keeps the key locks
    // from there: two transactions publishing a then b and b then a deadlock.
    // Deferred again by name, it takes them at COMMIT, in one order.
    const d = freshDestination();
    const [t1, t2] = await Promise.all([db.pool.connect(), db.pool.connect()]);
    try {
      for (const t of [t1, t2]) {
        await t.query('BEGIN');
        await t.query(`SET CONSTRAINTS ALL IMMEDIATE`);
        await t.query(`SET CONSTRAINTS ${db.s}.outbox_commit_order DEFERRED`);
      }
      await outbox.publish(d, 't1:a', { tx: t1, key: 'a' });
      await outbox.publish(d, 't2:b', { tx: t2, key: 'b' });
      await t1.query(`SET LOCAL lock_timeout = '5s'`);
      await t2.query(`SET LOCAL lock_timeout = '5s'`);
      await outbox.publish(d, 't1:b', { tx: t1, key: 'b' });
      await outbox.publish(d, 't2:a', { tx: t2, key: 'a' });
      await Promise.all([t1.query('COMMIT'), t2.query('COMMIT')]);
    } finally {
      t1.release();
      t2.release();
    }
    const broker = new MemoryBroker();
    await startRelay(broker, [d]).start();
    await waitFor(() => broker.stored.length === 4, 'all four published');
  });

  it('keeps a message moved inside a savepoint apart from those of the transaction whose id it moved to (outside review 140)', async () => {
    // A message moved to txid t inside a savepoint (the step runs at the statement's
    // end under IMMEDIATE) carries the savepoint's xid, which comes after t: told
    // apart by xmin, it passed for one of t's own, and t's step moved it too, behind
    // a message that committed after it.
    const d = freshDestination();
    const [a, b, t] = await Promise.all([db.pool.connect(), db.pool.connect(), db.pool.connect()]);
    try {
      await a.query('BEGIN');
      await a.query('SELECT pg_current_xact_id()');
      // B and T take ids one after the other (another session may take one in between: again).
      for (let attempt = 0; ; attempt++) {
        await b.query('BEGIN');
        await t.query('BEGIN');
        const ids = [b, t].map(async (c) => BigInt((await c.query('SELECT pg_current_xact_id()::text AS x')).rows[0].x));
        const [bx, tx] = [await ids[0]!, await ids[1]!];
        if (tx === bx + 1n) break;
        await b.query('ROLLBACK');
        await t.query('ROLLBACK');
        expect(attempt, 'two adjacent transaction ids').toBeLessThan(500);
      }
      await outbox.publish(d, 'B', { tx: b, key: 'k' });
      await b.query('COMMIT');
      await a.query('SAVEPOINT s');
      await a.query('SET CONSTRAINTS ALL IMMEDIATE');
      await outbox.publish(d, 'A', { tx: a, key: 'k' }); // moved to B's id + 1: T's
      await a.query('RELEASE SAVEPOINT s');
      await a.query('COMMIT');
      await outbox.publish(d, 'X', { key: 'k' });
      await outbox.publish(d, 'T', { tx: t, key: 'k' });
      await t.query('COMMIT');
    } finally {
      for (const c of [a, b, t]) {
        await c.query('ROLLBACK');
        c.release();
      }
    }
    expect(await relayedOfKey(d, 4, 'k')).toEqual(['B', 'A', 'X', 'T']);
  });

  it('publishes from REPEATABLE READ and SERIALIZABLE transactions as before, in the order they took their ids (migration 0039)', async () => {
    const d = freshDestination();
    const [early, late] = await Promise.all([db.pool.connect(), db.pool.connect()]);
    try {
      for (const level of ['REPEATABLE READ', 'SERIALIZABLE']) {
        await early.query(`BEGIN ISOLATION LEVEL ${level}`);
        await early.query('SELECT pg_current_xact_id()');
        await late.query(`BEGIN ISOLATION LEVEL ${level}`);
        await outbox.publish(d, `${level}:late`, { tx: late, key: 'k' });
        await late.query('COMMIT');
        await outbox.publish(d, `${level}:early`, { tx: early, key: 'k' });
        await early.query('COMMIT');
      }
    } finally {
      await early.query('ROLLBACK');
      early.release();
      late.release();
    }
    expect(await relayedOfKey(d, 4, 'k')).toEqual([
      'REPEATABLE READ:early',
      'REPEATABLE READ:late',
      'SERIALIZABLE:early',
      'SERIALIZABLE:late',
    ]);
  });

  it('refuses to lock keys once the transaction has its id, or a second time, and aborts it: too late to keep the order (migration 0032)', async () => {
    const d = freshDestination();
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await outbox.publish(d, { n: 1 }, { tx: client, key: 'k' });
      await expect(outbox.lockKeys(['k'], { tx: client })).rejects.toThrow(
        /^lockKeys: this transaction already has a transaction id \(it wrote or locked a row, or drew from a sequence\)/,
      );
      await expect(client.query('SELECT 1')).rejects.toThrow(/current transaction is aborted/);
      await client.query('ROLLBACK');
      // The same from SQL, after a row lock alone.
      await client.query('BEGIN');
      await client.query(`SELECT FROM ${db.s}.outbox_identity FOR UPDATE`);
      await expect(client.query(`SELECT ${db.s}.lock_outbox_keys('k')`)).rejects.toMatchObject({ code: '55000' });
      await client.query('ROLLBACK');
      // Keys locked call by call can deadlock (outside review 81): one call per transaction.
      // One without keys locks nothing and does not count (outside review 82).
      await client.query('BEGIN');
      await outbox.lockKeys([], { tx: client });
      await client.query(`SELECT ${db.s}.lock_outbox_keys(NULL)`);
      await outbox.lockKeys(['a', 'b'], { tx: client });
      await expect(outbox.lockKeys('c', { tx: client })).rejects.toThrow(/^lockKeys: this transaction locked keys already/);
      await client.query('ROLLBACK');
      // A savepoint rolled back releases its locks, and so allows another call.
      await client.query('BEGIN; SAVEPOINT s');
      await outbox.lockKeys('a', { tx: client });
      await client.query('ROLLBACK TO s');
      await outbox.lockKeys('a', { tx: client });
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    expect(await count('outbox', d)).toBe(0);
    const tx = { query: () => Promise.reject(new Error('not reached')) };
    await expect(outbox.lockKeys('k', {} as never)).rejects.toThrow(ConfigError);
    await expect(outbox.lockKeys('k', undefined as never)).rejects.toThrow(/lockKeys: pass \{ tx \}/);
    await expect(outbox.lockKeys('k', { tx, tz: 1 } as never)).rejects.toThrow(/lockKeys: unknown option "tz"/);
    // On a pool each statement may take another connection, outside any transaction: the locks would end at once.
    await expect(outbox.lockKeys('k', { tx: db.pool })).rejects.toThrow(/lockKeys: tx is a pool/);
    // And a publish on a pool would commit whatever the caller's transaction does (outside review 158).
    await expect(outbox.publish(d, { n: 1 }, { tx: db.pool })).rejects.toThrow(/tx is a pg Pool/);
    // Nor is a null tx taken as none (outside review 208).
    await expect(outbox.publish(d, { n: 1 }, { tx: null } as never)).rejects.toThrow(/^tx is null:/);
    await expect(outbox.lockKeys('k', { tx: true } as never)).rejects.toThrow(/^tx is true: pass the client/);
    expect(await count('outbox', d)).toBe(0);
    // Keys as publish() takes them (outside review 81: a NUL was a DatabaseError that aborted the transaction).
    for (const bad of [1, null, 'a\u0000b', '\uD800', 'x'.repeat(1025), 'a\nb'])
      await expect(outbox.lockKeys([bad] as never, { tx }), JSON.stringify(bad)).rejects.toThrow(ValidationError);
    await expect(outbox.lockKeys(Array.from({ length: 1001 }, String), { tx })).rejects.toThrow(/at most 1000 keys/);
    for (const key of [`repeat('x', 1025)`, `E'a\\nb'`])
      await expect(db.pool.query(`SELECT ${db.s}.lock_outbox_keys(${key})`), key).rejects.toMatchObject({ code: '22023' });
  });

  it("holds a key's lock until the transaction ends, in this schema only (migration 0032)", async () => {
    const other = await createTestSchema('outbox_locks');
    const [holder, here, there] = await Promise.all([db.pool.connect(), db.pool.connect(), other.pool.connect()]);
    try {
      await holder.query('BEGIN');
      // Several keys, a duplicate and a NULL (skipped) from SQL.
      await holder.query(`SELECT ${db.s}.lock_outbox_keys('b', 'a', NULL, 'a')`);
      for (const client of [here, there]) await client.query("BEGIN; SET LOCAL lock_timeout = '200ms'");
      // Same key, same schema: waits (here, until lock_timeout gives up).
      await expect(outbox.lockKeys(['c', 'a'], { tx: here })).rejects.toMatchObject({ sqlState: '55P03' });
      // Same key, another schema: free.
      await new Outbox({ pool: other.pool, schema: other.schema }).lockKeys(['a', 'b'], { tx: there });
      await holder.query('COMMIT');
      await here.query("ROLLBACK; BEGIN; SET LOCAL lock_timeout = '200ms'");
      await outbox.lockKeys(['a', 'b'], { tx: here });
    } finally {
      for (const client of [holder, here, there]) {
        await client.query('ROLLBACK');
        client.release();
      }
      await other.drop();
    }
  });
});
