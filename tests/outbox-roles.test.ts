import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Outbox, OutboxRelay } from '../src/index.js';
import { createTestSchema, waitFor, type TestDatabase } from './helpers/database.js';
import { MemoryBroker } from './helpers/outbox.js';
import { runCli } from './helpers/cli.js';

// The outbox part of sql/roles.sql, applied with random role names (roles are
// cluster-wide, and the shared server is used by others), then exercised by
// logging in as each role.
let db: TestDatabase;
const tag = randomBytes(4).toString('hex');
const groups: Record<string, string> = {
  sluice_worker: `sluice_worker_${tag}`,
  sluice_enqueue: `sluice_enqueue_${tag}`,
  sluice_outbox_publish: `sluice_outbox_publish_${tag}`,
  sluice_outbox_relay: `sluice_outbox_relay_${tag}`,
};
const logins = { publish: `op_login_${tag}`, relay: `or_login_${tag}` };
const PASSWORD = `pw_${tag}`;
const pools: Partial<Record<keyof typeof logins, pg.Pool>> = {};

function urlAs(user: string): string {
  const url = new URL(db.url);
  url.username = user;
  url.password = PASSWORD;
  return url.toString();
}

function poolAs(kind: keyof typeof logins): pg.Pool {
  const pool = (pools[kind] ??= new pg.Pool({ connectionString: urlAs(logins[kind]), max: 4 }));
  pool.on('error', () => {});
  return pool;
}

/** Each statement fails with "insufficient privilege" (and so, in its own transaction, changes nothing). */
async function expectRefused(pool: pg.Pool, statements: string[]): Promise<void> {
  for (const sql of statements) await expect(pool.query(sql), sql).rejects.toMatchObject({ code: '42501' });
}

beforeAll(async () => {
  db = await createTestSchema('outbox_roles');
  const names: Record<string, string> = { ':SCHEMA': db.s, ...groups };
  const script = (await readFile(new URL('../sql/roles.sql', import.meta.url), 'utf8')).replace(
    /:SCHEMA|sluice_outbox_publish|sluice_outbox_relay|sluice_worker|sluice_enqueue/g,
    (name) => names[name]!,
  );
  // What a careless older grant gave, which applying the file must take back.
  await db.pool.query(`CREATE ROLE ${groups.sluice_outbox_publish} NOLOGIN`);
  await db.pool.query(`GRANT SELECT, UPDATE ON ${db.s}.outbox TO ${groups.sluice_outbox_publish}`);
  // Functions executable by nobody but their owner (see roles.test.ts, outside review 163).
  await db.pool.query(`REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA ${db.s} FROM PUBLIC`);
  await db.pool.query(script);
  await db.pool.query(script); // re-running is harmless
  await db.pool.query(`CREATE ROLE ${logins.publish} LOGIN PASSWORD '${PASSWORD}' IN ROLE ${groups.sluice_outbox_publish}`);
  await db.pool.query(`CREATE ROLE ${logins.relay} LOGIN PASSWORD '${PASSWORD}' IN ROLE ${groups.sluice_outbox_relay}`);
});
afterAll(async () => {
  for (const pool of Object.values(pools)) await pool.end();
  for (const role of [...Object.values(logins), ...Object.values(groups)]) {
    await db.pool.query(`DROP OWNED BY ${role}`).catch(() => {});
    await db.pool.query(`DROP ROLE IF EXISTS ${role}`);
  }
  await db.drop();
});

describe('outbox roles (sql/roles.sql)', () => {
  it('the publish role publishes (API and SQL, in its transaction) and the relay role relays it all; neither can do the other job', async () => {
    const d = 'roles.orders';
    const outbox = new Outbox({ pool: poolAs('publish'), schema: db.schema });
    const ids = [
      await outbox.publish(d, { n: 1 }, { key: 'k' }),
      ...(await outbox.publishMany([
        { destination: d, payload: 'two', key: 'k', headers: { h: 'v' } },
        { destination: d, payload: new Uint8Array([3]), key: 'k' },
      ])),
    ];
    const client = await poolAs('publish').connect();
    try {
      await client.query('BEGIN');
      await outbox.publish(d, 'rolled back', { tx: client, key: 'k' });
      await client.query('ROLLBACK');
      await client.query('BEGIN');
      await outbox.lockKeys('k', { tx: client }); // needs no privilege on the outbox table
      ids.push(String((await client.query(`SELECT ${db.s}.publish($1, 'from sql', 'k') AS id`, [d])).rows[0].id));
      await client.query('COMMIT');
      // A transaction that took its id first and commits second: its message is
      // moved behind at COMMIT (migration 0039), which the publisher may not do itself.
      await client.query('BEGIN');
      await client.query('SELECT pg_current_xact_id()');
      ids.push(await outbox.publish(d, 'committed first', { key: 'k' }));
      ids.push(await outbox.publish(d, 'committed second', { tx: client, key: 'k' }));
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    expect(ids).toHaveLength(6);

    // The publisher may not read, rewrite, delete or place messages, nor touch the relay's tables.
    await expectRefused(poolAs('publish'), [
      `SELECT payload FROM ${db.s}.outbox`,
      `UPDATE ${db.s}.outbox SET payload = 'x'`,
      `DELETE FROM ${db.s}.outbox`,
      `INSERT INTO ${db.s}.outbox (txid, destination, payload) VALUES ('1', '${d}', 'x')`,
      `UPDATE ${db.s}.outbox_relays SET txid = '0', id = 0`,
      `SELECT * FROM ${db.s}.outbox_dead_letters`,
    ]);

    // The relay, logged in as the relay role: reads, publishes in order, moves the
    // watermark, deletes what it published. VACUUM is the owner's (vacuumEvery: 0).
    const broker = new MemoryBroker();
    const relay = new OutboxRelay({
      pool: poolAs('relay'),
      schema: db.schema,
      publisher: broker,
      destinations: [d],
      pollIntervalMs: 50,
      cleanupIntervalMs: 50,
      vacuumEvery: 0,
    });
    const errors: string[] = [];
    relay.events.on('error', (err) => errors.push(err.message));
    await relay.start();
    try {
      await waitFor(() => broker.stored.length === 6, 'the six committed messages relayed');
      expect(broker.ofKey('k')).toEqual(['{"n":1}', 'two', '\u0003', 'from sql', 'committed first', 'committed second']);
      await waitFor(
        async () => Number((await db.pool.query(`SELECT count(*) AS n FROM ${db.s}.outbox`)).rows[0].n) === 0,
        'published messages deleted by the relay role',
      );
      const lag = await relay.lag();
      expect(lag.map((l) => [l.destination, l.published, l.waiting])).toEqual([[d, 6, 0]]);
    } finally {
      await relay.stop();
    }
    expect(errors).toEqual([]);

    // The relay may not add or change messages.
    await expectRefused(poolAs('relay'), [
      `INSERT INTO ${db.s}.outbox (destination, payload) VALUES ('${d}', 'forged')`,
      `SELECT ${db.s}.publish('${d}', 'forged'::text)`,
      `UPDATE ${db.s}.outbox SET payload = 'x'`,
      `UPDATE ${db.s}.outbox_relays SET partitions = 2`,
      `DELETE FROM ${db.s}.outbox_dead_letters`,
    ]);
    // Nor hold a partition for good (migration 0048, outside review 267: a lease to 'infinity').
    await expect(
      poolAs('relay').query(`UPDATE ${db.s}.outbox_relays SET holder = 'ghost', expires_at = 'infinity' WHERE destination = $1`, [
        d,
      ]),
    ).rejects.toMatchObject({ code: '23514', constraint: 'outbox_relays_lease_bound' });
  });

  it('a poison message goes to the dead letters under the relay role', async () => {
    const d = 'roles.poison';
    const outbox = new Outbox({ pool: poolAs('publish'), schema: db.schema });
    await outbox.publish(d, 'bad', { key: 'p' });
    await outbox.publish(d, 'good', { key: 'p' });
    const broker = new MemoryBroker();
    broker.refuse = (m) => m.payload.toString() === 'bad';
    const relay = new OutboxRelay({
      pool: poolAs('relay'),
      schema: db.schema,
      publisher: broker,
      destinations: [d],
      pollIntervalMs: 50,
      cleanupIntervalMs: 50,
      vacuumEvery: 0,
      maxAttempts: 2,
      retry: { minMs: 5, maxMs: 20 },
    });
    const errors: string[] = [];
    relay.events.on('error', (err) => errors.push(err.message));
    const dead: string[] = [];
    relay.events.on('deadLetter', (x) => dead.push(x.messageId));
    await relay.start();
    try {
      // The broker took 'good' in the same batch as the refused one; it is sent again after.
      await waitFor(() => dead.length === 1, 'the poison message dead-lettered');
      await waitFor(
        async () => Number((await db.pool.query(`SELECT count(*) AS n FROM ${db.s}.outbox`)).rows[0].n) === 0,
        'the key gone on past it, and both deleted',
      );
    } finally {
      await relay.stop();
    }
    expect(errors).toEqual([]);
    const { rows } = await db.pool.query(
      `SELECT convert_from(payload, 'UTF8') AS body, attempts FROM ${db.s}.outbox_dead_letters WHERE destination = $1`,
      [d],
    );
    expect(rows).toEqual([{ body: 'bad', attempts: 2 }]);
    expect((await db.pool.query(`SELECT count(*)::int AS n FROM ${db.s}.outbox_failures`)).rows[0].n).toBe(0);
  });

  it('sluice relay --status and --dead-letters run as the relay role; a role without it is told to grant it (outside review 210)', async () => {
    for (const action of ['--status', '--dead-letters']) {
      const result = await runCli(urlAs(logins.relay), db.schema, ['relay', action, '--json']);
      expect(result.stderr, action).toBe('');
      expect(result.code, action).toBe(0);
    }
    // The publish role may not read the relays' table: refused, naming the relay's role.
    const refused = await runCli(urlAs(logins.publish), db.schema, ['relay', '--status']);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(/permission denied for table outbox_relays .*sluice_outbox_relay for relay/);
  });
});

describe("the outbox's commit-order functions (migration 0046)", () => {
  it('are not PUBLIC: a role with USAGE on the schema alone cannot lock messages or set settings as the owner (outside review 239)', async () => {
    // A schema as migrated, without the file's REVOKE of every function above.
    const fresh = await createTestSchema('outbox_public');
    const role = `outbox_public_${tag}`;
    await fresh.pool.query(`CREATE ROLE ${role} LOGIN PASSWORD '${PASSWORD}'`);
    const pool = new pg.Pool({ connectionString: urlAs(role), max: 1 });
    try {
      await fresh.pool.query(`GRANT USAGE ON SCHEMA ${fresh.s} TO ${role}`);
      await fresh.pool.query(`SELECT ${fresh.s}.publish('d', '{}'::jsonb, 'k')`);
      const { rows } = await fresh.pool.query<{ txid: string; id: string }>(`SELECT txid::text, id::text FROM ${fresh.s}.outbox`);
      const [message] = rows;
      await expectRefused(pool, [
        `SELECT ${fresh.s}.queue_outbox_commit_order('d', '${message!.txid}'::xid8, ${message!.id}, 'sluice.outbox_ordered_1')`,
        `SELECT ${fresh.s}.order_outbox_commit()`,
      ]);
      // The owner still may, and only for the settings the order keeps.
      await expect(
        fresh.pool.query(`SELECT ${fresh.s}.queue_outbox_commit_order('d', '1'::xid8, 1, 'work_mem')`),
      ).rejects.toMatchObject({ code: '22023', message: /work_mem is not a setting of the outbox's commit order/ });
    } finally {
      await pool.end();
      await fresh.pool.query(`DROP OWNED BY ${role}`);
      await fresh.pool.query(`DROP ROLE ${role}`);
      await fresh.drop();
    }
  });
});
