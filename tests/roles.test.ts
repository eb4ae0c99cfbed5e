import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ConfigError,
  currentLeader,
  DatabaseError,
  DuplicateJobError,
  MigrationError,
  Queue,
  Snooze,
  Worker,
  type SluiceError,
} from '../src/index.js';
import { createTestSchema, nextEvent, waitFor, type TestDatabase } from './helpers/database.js';
import { FIXTURES, runCli, spawnCli } from './helpers/cli.js';

// sql/roles.sql applied with random role names (roles are cluster-wide, and the
// shared server is used by others), then exercised by logging in as each role.
let db: TestDatabase;
const tag = randomBytes(4).toString('hex');
const groups = {
  worker: `sluice_worker_${tag}`,
  enqueue: `sluice_enqueue_${tag}`,
  // The outbox's roles (tested in outbox-roles.test.ts), renamed too so that no role of the real name is created.
  publish: `sluice_outbox_publish_${tag}`,
  relay: `sluice_outbox_relay_${tag}`,
};
// wide: a role granted everything on the table, as a careless GRANT ALL would.
// none: a role with no grant at all.
const logins = { worker: `w_login_${tag}`, enqueue: `e_login_${tag}`, wide: `x_login_${tag}`, none: `n_login_${tag}` };
const PASSWORD = `pw_${tag}`;
const cleanup: (() => Promise<void>)[] = [];
const pools: Record<keyof typeof logins, pg.Pool> = {} as never;

/** A payload over the server's default limit for roles that do not own the schema (1 MiB). */
const BIG = { blob: 'x'.repeat(2 * 1024 * 1024) };

function urlAs(user: string): string {
  const url = new URL(db.url);
  url.username = user;
  url.password = PASSWORD;
  return url.toString();
}

/** Every row of the tables a role could tamper with, as the owner sees them. */
async function snapshot(): Promise<unknown[]> {
  const { rows } = await db.pool.query(`SELECT
      (SELECT coalesce(jsonb_agg(to_jsonb(j) ORDER BY id), '[]') FROM ${db.s}.jobs j) AS jobs,
      (SELECT coalesce(jsonb_agg(to_jsonb(q) ORDER BY name), '[]') FROM ${db.s}.queues q) AS queues,
      (SELECT coalesce(jsonb_agg(to_jsonb(l) ORDER BY role), '[]') FROM ${db.s}.leader l) AS leader`);
  return rows;
}

/** Each statement fails with that SQLSTATE (and so, in its own transaction, changes nothing). */
async function expectRefused(pool: pg.Pool, code: string, statements: (string | [string, unknown[]])[]): Promise<void> {
  for (const entry of statements) {
    const [sql, params] = typeof entry === 'string' ? [entry, []] : entry;
    await expect(pool.query(sql, params), sql).rejects.toMatchObject({ code });
  }
}

/** Inserts a job as the owner, in any state, and returns its id. */
async function ownerInsert(columns: Record<string, unknown>): Promise<string> {
  const names = Object.keys(columns);
  const { rows } = await db.pool.query(
    `INSERT INTO ${db.s}.jobs (${names.join(', ')}) VALUES (${names.map((_, i) => `$${i + 1}`).join(', ')}) RETURNING id::text`,
    Object.values(columns),
  );
  return rows[0].id;
}

beforeAll(async () => {
  db = await createTestSchema('roles');
  // What an older sql/roles.sql granted, which applying this one must take back.
  for (const group of Object.values(groups)) await db.pool.query(`CREATE ROLE ${group} NOLOGIN`);
  await db.pool.query(`GRANT USAGE ON SCHEMA ${db.s} TO ${groups.enqueue}, ${groups.worker}`);
  await db.pool.query(`GRANT INSERT ON ${db.s}.jobs TO ${groups.enqueue}`);
  await db.pool.query(`GRANT UPDATE (payload, run_at, updated_at) ON ${db.s}.jobs TO ${groups.enqueue}`);
  await db.pool.query(`GRANT SELECT, UPDATE ON ${db.s}.jobs, ${db.s}.queues TO ${groups.worker}`);

  const names: Record<string, string> = {
    ':SCHEMA': db.s,
    sluice_worker: groups.worker,
    sluice_enqueue: groups.enqueue,
    sluice_outbox_publish: groups.publish,
    sluice_outbox_relay: groups.relay,
  };
  const script = (await readFile(new URL('../sql/roles.sql', import.meta.url), 'utf8')).replace(
    /:SCHEMA|sluice_outbox_publish|sluice_outbox_relay|sluice_worker|sluice_enqueue/g,
    (name) => names[name]!,
  );
  // Functions executable by nobody but their owner, as on a server hardened with ALTER DEFAULT
  // PRIVILEGES … REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC: roles.sql must grant what each role
  // calls (outside review 163: claims of limited queues were refused for claim_queue).
  await db.pool.query(`REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA ${db.s} FROM PUBLIC`);
  await db.pool.query(script);
  await db.pool.query(script); // re-running is harmless
  await db.pool.query(`CREATE ROLE ${logins.worker} LOGIN PASSWORD '${PASSWORD}' IN ROLE ${groups.worker}`);
  await db.pool.query(`CREATE ROLE ${logins.enqueue} LOGIN PASSWORD '${PASSWORD}' IN ROLE ${groups.enqueue}`);
  await db.pool.query(`CREATE ROLE ${logins.wide} LOGIN PASSWORD '${PASSWORD}'`);
  await db.pool.query(`CREATE ROLE ${logins.none} LOGIN PASSWORD '${PASSWORD}'`);
  await db.pool.query(`GRANT USAGE ON SCHEMA ${db.s} TO ${logins.wide}`);
  await db.pool.query(`GRANT ALL ON ${db.s}.jobs, ${db.s}.jobs_id_seq TO ${logins.wide}`);
  // Its inserts' wake-up (the trigger's) calls wake_payload(), which PUBLIC may not execute here.
  await db.pool.query(`GRANT EXECUTE ON FUNCTION ${db.s}.wake_payload(text, timestamptz) TO ${logins.wide}`);
  for (const kind of Object.keys(logins) as (keyof typeof logins)[]) {
    pools[kind] = new pg.Pool({ connectionString: urlAs(logins[kind]), max: 2 });
    pools[kind].on('error', () => {});
  }
});
afterAll(async () => {
  for (const fn of cleanup) await fn();
  for (const pool of Object.values(pools)) await pool.end();
  for (const role of [...Object.values(logins), ...Object.values(groups)]) {
    await db.pool.query(`DROP OWNED BY ${role}`).catch(() => {});
    await db.pool.query(`DROP ROLE IF EXISTS ${role}`);
  }
  await db.drop();
});

describe('least-privilege roles (sql/roles.sql and migration 0011)', () => {
  it('applying roles.sql takes back what an older version granted', async () => {
    const { rows } = await db.pool.query(
      `SELECT
        has_table_privilege($1, '${db.s}.jobs', 'INSERT') AS enqueue_inserts_any_column,
        has_column_privilege($1, '${db.s}.jobs', 'status', 'INSERT') AS enqueue_inserts_status,
        has_column_privilege($1, '${db.s}.jobs', 'payload', 'UPDATE') AS enqueue_updates_payload,
        has_table_privilege($2, '${db.s}.jobs', 'UPDATE') AS worker_updates_any_column,
        has_column_privilege($2, '${db.s}.jobs', 'payload', 'UPDATE') AS worker_updates_payload,
        has_column_privilege($2, '${db.s}.queues', 'paused', 'UPDATE') AS worker_pauses`,
      [groups.enqueue, groups.worker],
    );
    expect(
      Object.values(rows[0]).every((v) => v === false),
      JSON.stringify(rows[0]),
    ).toBe(true);
  });

  it('a worker logged in as sluice_worker runs every kind of job a role holding sluice_enqueue adds, job keys in every mode', async () => {
    const queue = new Queue({ connectionString: urlAs(logins.enqueue), schema: db.schema });
    cleanup.push(() => queue.close());
    await db.pool.query(`INSERT INTO ${db.s}.queues (name, concurrency_limit) VALUES ('lim', 2)`);

    // Enqueued every way: one alone, several at once (those send their wake-up
    // after the COMMIT and read run_at back), many in one statement, inside a
    // transaction, and through enqueue_job() from SQL.
    const plain = [
      await queue.enqueue('t', { n: 'alone' }),
      ...(await Promise.all([1, 2, 3].map((i) => queue.enqueue('t', { n: `concurrent ${i}` })))),
      ...(await queue.enqueueMany([
        { task: 't', payload: { n: 'many' } },
        { task: 't', payload: { n: 'limited' }, queue: 'lim' },
        // The worker that claims it flags its queue grouped (mark_queue_grouped(), 0021).
        { task: 't', payload: { n: 'grouped' }, queue: 'grp', group: 'tenant-1' },
      ])),
      // Inserted flagged for waitFor() (0045: the insert guard refused it to this role).
      await queue.enqueue('t', { n: 'waitable' }, { waitable: true }),
      ...(await queue.enqueueMany([{ task: 't', payload: { n: 'waitable many' }, waitable: true }])),
    ];
    const client = await queue.pool!.connect();
    try {
      await client.query('BEGIN');
      plain.push(await queue.enqueue('t', { n: 'in a transaction' }, { tx: client }));
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    plain.push(
      String((await queue.pool!.query(`SELECT ${db.s}.enqueue_job('default', '{"task":"t","n":"sql"}') AS id`)).rows[0].id),
    );

    // Job keys: keep returns the holder, replace gives it the new payload, error
    // refuses; a key held while processing is still held while the job runs.
    const keep = `keep-${tag}`;
    const held = await queue.enqueue('t', { n: 'keyed v1' }, { jobKey: keep });
    expect(await queue.enqueue('t', { n: 'keyed v2' }, { jobKey: keep })).toBe(held);
    expect(await queue.enqueue('t', { n: 'keyed v3' }, { jobKey: keep, jobKeyMode: 'replace' })).toBe(held);
    await expect(queue.enqueue('t', { n: 'keyed v4' }, { jobKey: keep, jobKeyMode: 'error' })).rejects.toBeInstanceOf(
      DuplicateJobError,
    );
    const [manyKeyed, sameHolder] = await queue.enqueueMany([
      { task: 't', payload: { n: 'keyed many' }, jobKey: `many-${tag}` },
      { task: 't', payload: { n: 'keyed v5' }, jobKey: keep, jobKeyMode: 'replace' },
    ]);
    expect(sameHolder).toBe(held);
    const viaSqlKey = String(
      (
        await queue.pool!.query(
          `SELECT ${db.s}.enqueue_job('default', '{"task":"t","n":"sql keyed"}', _job_key => $1, _job_key_mode => 'replace') AS id`,
          [`sql-${tag}`],
        )
      ).rows[0].id,
    );
    const whileProcessing = await queue.enqueue('slow', {}, { jobKey: `active-${tag}`, jobKeyWhileProcessing: true });
    const others = [
      await queue.enqueue('boom', {}, { maxAttempts: 2 }),
      await queue.enqueue('snoozy', {}),
      await queue.enqueue('progress', {}),
    ];

    // A job whose worker died: its lock expired long ago, the leader rescues it.
    const stale = await ownerInsert({
      task: 't',
      payload: { n: 'rescued' },
      status: 'processing',
      attempts: 1,
      started_at: new Date(0),
      locked_at: new Date(Date.now() - 3_600_000),
      locked_by: 'dead-worker',
    });

    let release!: () => void;
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    let started!: () => void;
    const slowStarted = new Promise<void>((resolve) => {
      started = resolve;
    });
    let snoozed = false;
    const worker = new Worker({
      connectionString: urlAs(logins.worker),
      schema: db.schema,
      queues: ['default', 'lim', 'grp'],
      heartbeatIntervalMs: 100,
      visibilityTimeoutMs: 5_000,
      rescueIntervalMs: 200,
      backoff: { baseMs: 20, shape: 'fixed' },
      maintenance: { pruner: false },
      schedules: [{ name: `tick-${tag}`, cron: '* * * * * *', task: 'tick' }],
      tasks: {
        t: async (payload: { n: string }) => {
          await new Promise((r) => setTimeout(r, 250)); // long enough for heartbeats
          return { ran: payload.n };
        },
        slow: async () => {
          started();
          await released;
        },
        boom: () => {
          throw new Error('boom');
        },
        snoozy: () => {
          if (!snoozed) {
            snoozed = true;
            throw new Snooze(10);
          }
          return 'woke';
        },
        progress: (_payload, ctx) => {
          ctx.progress({ pct: 50 });
          return 'done';
        },
        tick: () => 'ticked',
      },
    });
    const errors: SluiceError[] = [];
    worker.on('error', (err) => errors.push(err));
    const elected = nextEvent(worker, 'leader:elected');
    await worker.start();
    cleanup.push(() => worker.stop());
    await elected;

    // While the job runs, its key is still held: keep and replace both get the running job, unchanged.
    await slowStarted;
    expect(await queue.enqueue('slow', { n: 'again' }, { jobKey: `active-${tag}` })).toBe(whileProcessing);
    expect(await queue.enqueue('slow', { n: 'again' }, { jobKey: `active-${tag}`, jobKeyMode: 'replace' })).toBe(whileProcessing);
    release();

    const all = [...plain, held, manyKeyed!, viaSqlKey, whileProcessing, ...others, stale];
    await waitFor(async () => {
      const { rows } = await db.pool.query(
        `SELECT count(*)::int AS n FROM ${db.s}.jobs WHERE id = ANY($1::bigint[]) AND status IN ('completed', 'failed')`,
        [all],
      );
      const ticks = await db.pool.query(
        `SELECT count(*)::int AS n FROM ${db.s}.jobs WHERE task = 'tick' AND status = 'completed'`,
      );
      return rows[0].n === all.length && ticks.rows[0].n >= 1;
    }, 'every job finished and a cron tick run');
    await worker.stop();
    expect(errors).toEqual([]);
    expect((await db.pool.query(`SELECT grouped FROM ${db.s}.queues WHERE name = 'grp'`)).rows).toEqual([{ grouped: true }]);

    const { rows } = await db.pool.query(
      `SELECT id::text, status, result, progress, attempts, jsonb_array_length(errors) AS failures, key_scope
       FROM ${db.s}.jobs WHERE id = ANY($1::bigint[])`,
      [all],
    );
    const byId = new Map(rows.map((r) => [r.id, r]));
    expect(rows.filter((r) => r.id !== others[0]).every((r) => r.status === 'completed')).toBe(true);
    expect(byId.get(held)).toMatchObject({ result: { ran: 'keyed v5' } });
    expect(byId.get(whileProcessing)).toMatchObject({ status: 'completed', key_scope: 'active' });
    expect(byId.get(others[0]!)).toMatchObject({ status: 'failed', attempts: 2, failures: 2 });
    expect(byId.get(others[1]!)).toMatchObject({ result: 'woke', attempts: 1 });
    expect(byId.get(others[2]!)).toMatchObject({ result: 'done', progress: { pct: 50 } });
    expect(byId.get(stale)).toMatchObject({ result: { ran: 'rescued' }, attempts: 2, failures: 1 });
    const ran = rows
      .filter((r) => r.result?.ran)
      .map((r) => r.result.ran)
      .sort();
    expect(ran).toEqual([
      'alone',
      'concurrent 1',
      'concurrent 2',
      'concurrent 3',
      'grouped',
      'in a transaction',
      'keyed many',
      'keyed v5',
      'limited',
      'many',
      'rescued',
      'sql',
      'sql keyed',
      'waitable',
      'waitable many',
    ]);
  });

  it("the worker role's claim of a grouped queue may record that it found no job without a group (0041)", async () => {
    await db.pool.query(`INSERT INTO ${db.s}.queues (name, grouped) VALUES ('held-grouped', true)`);
    await db.pool.query(`INSERT INTO ${db.s}.job_groups (queue, group_key, concurrency_limit) VALUES ('held-grouped', 'g', 1)`);
    await db.pool.query(
      `INSERT INTO ${db.s}.jobs (queue, task, group_key) SELECT 'held-grouped', 't', 'g' FROM generate_series(1, 300)`,
    );
    const claim = `SELECT count((c.job).id)::int AS n FROM ${db.s}.claim_queue('held-grouped', 'w', '{t}', 10, 40, 10, '{}') c`;
    // The first takes g's one job; the second finds 300 held back and nothing else: its deeper look writes the queue's row.
    expect((await pools.worker.query(claim)).rows).toEqual([{ n: 1 }]);
    expect((await pools.worker.query(claim)).rows).toEqual([{ n: 0 }]);
    const { rows } = await db.pool.query(`SELECT ungrouped_none_at FROM ${db.s}.queues WHERE name = 'held-grouped'`);
    expect(rows[0].ungrouped_none_at).toBeInstanceOf(Date);
  });

  it('a role granted by a roles.sql older than 0045 is told why a waitable job is refused; plain jobs still go in', async () => {
    const queue = new Queue({ connectionString: urlAs(logins.enqueue), schema: db.schema });
    cleanup.push(() => queue.close());
    await db.pool.query(`REVOKE INSERT (notify_on_finish) ON ${db.s}.jobs FROM ${groups.enqueue}`);
    try {
      for (const enqueue of [
        () => queue.enqueue('t', { n: 'stale grant' }, { queue: 'stale-grant', waitable: true }),
        () => queue.enqueueMany([{ task: 't', payload: { n: 'stale grant' }, queue: 'stale-grant', waitable: true }]),
      ]) {
        const refused = await enqueue().catch((err: unknown) => err);
        expect(refused).toBeInstanceOf(DatabaseError);
        expect(refused).toMatchObject({ sqlState: '42501' });
        expect((refused as Error).message).toMatch(/permission denied .*notify_on_finish.*re-apply roles\.sql/);
      }
      await queue.enqueue('t', { n: 'plain' }, { queue: 'stale-grant' });
    } finally {
      await db.pool.query(`GRANT INSERT (notify_on_finish) ON ${db.s}.jobs TO ${groups.enqueue}`);
    }
    const { rows } = await db.pool.query(`SELECT payload->>'n' AS n FROM ${db.s}.jobs WHERE queue = 'stale-grant'`);
    expect(rows).toEqual([{ n: 'plain' }]);
  });

  it('a role that may read jobs but not flag them waits for a waitable job; for another, waitFor says why it cannot (outside review 227)', async () => {
    const queue = new Queue({ connectionString: urlAs(logins.enqueue), schema: db.schema });
    cleanup.push(() => queue.close());
    await db.pool.query(`GRANT SELECT ON ${db.s}.jobs, ${db.s}.jobs_history TO ${logins.enqueue}`);
    const worker = new Worker({ connectionString: db.url, schema: db.schema, queues: ['read-wait'], tasks: { t: () => 'done' } });
    try {
      const waitable = await queue.enqueue('t', {}, { queue: 'read-wait', waitable: true });
      const plain = await queue.enqueue('t', {}, { queue: 'read-wait', delayMs: 3_600_000 });
      const waiting = queue.waitFor(waitable, { timeoutMs: 20_000 });
      await worker.start();
      expect(await waiting).toMatchObject({ status: 'completed', result: 'done' });
      const refused = await queue.waitFor(plain, { timeoutMs: 5_000 }).catch((err: unknown) => err);
      expect(refused).toBeInstanceOf(DatabaseError);
      expect(refused).toMatchObject({ sqlState: '42501' });
      expect((refused as Error).message).toMatch(
        /^waitFor failed: .*only the schema's owner may do; enqueue the job with waitable: true/,
      );
    } finally {
      await worker.stop();
      await db.pool.query(`REVOKE SELECT ON ${db.s}.jobs, ${db.s}.jobs_history FROM ${logins.enqueue}`);
    }
  });

  it('the enqueue role cannot change, forge, lock, read or delete jobs, nor skip the payload limit', async () => {
    const pool = pools.enqueue;
    const completed = await ownerInsert({ task: 't', status: 'completed', result: { real: true }, finished_at: new Date() });
    const pending = await ownerInsert({ task: 't', job_key: `victim-${tag}`, key_scope: 'pending' });
    const before = await snapshot();

    await expectRefused(pool, '42501', [
      // Rewrite the payload of a completed job; push a job out by 100 years.
      [`UPDATE ${db.s}.jobs SET payload = '{"forged":true}' WHERE id = $1`, [completed]],
      [`UPDATE ${db.s}.jobs SET run_at = now() + interval '100 years' WHERE id = $1`, [pending]],
      // A row that claims to be completed with a forged result.
      `INSERT INTO ${db.s}.jobs (task, status, result, finished_at) VALUES ('t', 'completed', '{"forged":true}', now())`,
      // A processing row holding a key, its heartbeat ten years ahead: the rescuer would never free the key.
      `INSERT INTO ${db.s}.jobs (task, status, attempts, job_key, key_scope, locked_at, locked_by)
       VALUES ('t', 'processing', 1, 'blocked-${tag}', 'active', now() + interval '10 years', 'nobody')`,
      // Keys are taken only through enqueue_job(), which decides what a conflict does.
      `INSERT INTO ${db.s}.jobs (task, job_key, key_scope) VALUES ('t', 'raw-${tag}', 'active')`,
      `INSERT INTO ${db.s}.jobs (task, created_at) VALUES ('t', now() - interval '1 year')`,
      `DELETE FROM ${db.s}.jobs`,
      `TRUNCATE ${db.s}.jobs`,
      `SELECT payload FROM ${db.s}.jobs`,
      `SELECT job_key, status FROM ${db.s}.jobs`,
      // No row locks: a held lock would stall workers.
      `SELECT id FROM ${db.s}.jobs FOR UPDATE SKIP LOCKED`,
      `SELECT id FROM ${db.s}.jobs FOR KEY SHARE`,
      `SELECT * FROM ${db.s}.claim_limited('default', 'me', '{t}', 10)`,
      `UPDATE ${db.s}.queues SET paused = true`,
      `INSERT INTO ${db.s}.queues (name, paused) VALUES ('default', true)`,
      `SELECT * FROM ${db.s}.leader`,
      `INSERT INTO ${db.s}.cron_schedules (name, cron, timezone, task, queue, last_tick) VALUES ('x', '* * * * *', 'UTC', 't', 'default', now())`,
      `SELECT * FROM ${db.s}.jobs_history`,
    ]);

    // The payload limit holds whichever way the job comes in, and a session cannot lift it.
    const big = JSON.stringify(BIG);
    await expectRefused(pool, '54000', [
      [`INSERT INTO ${db.s}.jobs (task, payload) VALUES ('t', $1::jsonb)`, [big]],
      [`SELECT ${db.s}.enqueue_job('default', $1::jsonb, _task => 't')`, [big]],
      [
        `SELECT ${db.s}.enqueue_job('default', $1::jsonb, _task => 't', _job_key => $2, _job_key_mode => 'replace')`,
        [big, `victim-${tag}`],
      ],
      [`SELECT ${db.s}.enqueue_job('default', $1::jsonb, _task => 't', _job_key => $2)`, [big, `new-${tag}`]],
    ]);
    const client = await pool.connect();
    try {
      await client.query(`SET sluice.max_payload_bytes = '100000000'`);
      await expect(client.query(`INSERT INTO ${db.s}.jobs (task, payload) VALUES ('t', $1::jsonb)`, [big])).rejects.toMatchObject(
        { code: '54000' },
      );
    } finally {
      client.release();
    }
    // A Queue configured for larger payloads passes the client's check and meets the server's.
    const queue = new Queue({ pool, schema: db.schema, maxPayloadBytes: 4 * 1024 * 1024 });
    const refused = await queue.enqueue('t', BIG).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(DatabaseError);
    expect((refused as DatabaseError).sqlState).toBe('54000');
    await expect(
      pool.query(`SELECT ${db.s}.enqueue_job('default', '{}', _task => 't', _job_key => 'k', _job_key_mode => 'steal')`),
    ).rejects.toMatchObject({ code: '22023' });

    expect(await snapshot()).toEqual(before);

    // The owner decides the limit, for roles that do not own the schema, and is not bound by it.
    await db.pool.query(`SELECT ${db.s}.set_max_payload_bytes(4194304)`);
    try {
      const id = await queue.enqueue('t', BIG);
      const { rows } = await db.pool.query(`SELECT length(payload->>'blob') AS n FROM ${db.s}.jobs WHERE id = $1`, [id]);
      expect(rows[0].n).toBe(BIG.blob.length);
    } finally {
      await db.pool.query(`SELECT ${db.s}.set_max_payload_bytes(1048576)`);
    }
    await expect(
      new Queue({ pool: db.pool, schema: db.schema, maxPayloadBytes: 4 * 1024 * 1024 }).enqueue('t', BIG),
    ).resolves.toMatch(/^\d+$/);
  });

  it('the worker role cannot un-pause queues, rewrite jobs, touch finished ones or add and delete jobs', async () => {
    const pool = pools.worker;
    await db.pool.query(`INSERT INTO ${db.s}.queues (name, paused, concurrency_limit) VALUES ('held', true, 1)`);
    const pending = await ownerInsert({ task: 't', queue: 'held' });
    const completed = await ownerInsert({ task: 't', status: 'completed', result: { real: true }, finished_at: new Date() });
    const failed = await ownerInsert({ task: 't', status: 'failed', attempts: 5, finished_at: new Date() });
    const running = await ownerInsert({
      task: 't',
      status: 'processing',
      attempts: 1,
      locked_at: new Date(),
      locked_by: 'w',
      job_key: `run-${tag}`,
      key_scope: 'released',
    });
    const before = await snapshot();

    await expectRefused(pool, '42501', [
      // Column privileges: queues are the admin's, a job's what and where are the enqueuer's.
      `UPDATE ${db.s}.queues SET paused = false WHERE name = 'held'`,
      `UPDATE ${db.s}.queues SET concurrency_limit = NULL WHERE name = 'held'`,
      `INSERT INTO ${db.s}.queues (name, paused) VALUES ('other', true)`,
      `DELETE FROM ${db.s}.queues`,
      // Group settings too: a claim adds a group's row by name alone (outside review 266).
      `INSERT INTO ${db.s}.job_groups (queue, group_key, concurrency_limit) VALUES ('held', 'tenant', 1)`,
      `INSERT INTO ${db.s}.job_groups (queue, group_key, weight) VALUES ('held', 'tenant', 1000)`,
      [`UPDATE ${db.s}.jobs SET task = 'other' WHERE id = $1`, [pending]],
      [`UPDATE ${db.s}.jobs SET payload = '{"forged":true}' WHERE id = $1`, [running]],
      [`UPDATE ${db.s}.jobs SET queue = 'default', priority = 100 WHERE id = $1`, [pending]],
      [`UPDATE ${db.s}.jobs SET max_attempts = 1000 WHERE id = $1`, [running]],
      [`UPDATE ${db.s}.jobs SET job_key = 'other' WHERE id = $1`, [running]],
      `INSERT INTO ${db.s}.jobs (task) VALUES ('t')`,
      `DELETE FROM ${db.s}.jobs`,
      `TRUNCATE ${db.s}.jobs`,
      `SELECT * FROM ${db.s}.jobs_history`,
      // The state machine (0011): only a run's own steps.
      [`UPDATE ${db.s}.jobs SET result = '{"forged":true}' WHERE id = $1`, [completed]],
      [`UPDATE ${db.s}.jobs SET status = 'pending', attempts = 0, finished_at = NULL WHERE id = $1`, [failed]],
      [`UPDATE ${db.s}.jobs SET run_at = now() + interval '100 years' WHERE id = $1`, [pending]],
      [`UPDATE ${db.s}.jobs SET status = 'cancelled', finished_at = now() WHERE id = $1`, [pending]],
      [`UPDATE ${db.s}.jobs SET status = 'completed', result = '{"forged":true}' WHERE id = $1`, [pending]],
      [`UPDATE ${db.s}.jobs SET status = 'processing', locked_at = now(), locked_by = 'me' WHERE id = $1`, [pending]],
      [`UPDATE ${db.s}.jobs SET status = 'cancelled' WHERE id = $1`, [running]],
      [`UPDATE ${db.s}.jobs SET key_scope = 'active' WHERE id = $1`, [running]],
    ]);
    // Times past what Sluice writes (migration 0048, outside review 267): a lock, a token
    // bucket, a registry row far ahead froze what they guard.
    await db.pool.query(`INSERT INTO ${db.s}.job_groups (queue, group_key) VALUES ('held', 'tenant')`);
    await expectRefused(pool, '23514', [
      [`UPDATE ${db.s}.jobs SET locked_at = 'infinity' WHERE id = $1`, [running]],
      [`UPDATE ${db.s}.jobs SET locked_at = now() + interval '100 years' WHERE id = $1`, [running]],
      `UPDATE ${db.s}.queues SET tokens = -1e9 WHERE name = 'held'`,
      `UPDATE ${db.s}.queues SET tokens = 0, tokens_at = now() + interval '100 years' WHERE name = 'held'`,
      `UPDATE ${db.s}.job_groups SET tokens = -1e300 WHERE queue = 'held'`,
      `UPDATE ${db.s}.job_groups SET tokens_at = now() + interval '1 day' WHERE queue = 'held'`,
      // Nor infinite, nor NaN (outside review 269: '-infinity' failed every claim of the queue).
      `UPDATE ${db.s}.queues SET tokens = 1, tokens_at = '-infinity' WHERE name = 'held'`,
      `UPDATE ${db.s}.job_groups SET tokens = 'NaN' WHERE queue = 'held'`,
      `INSERT INTO ${db.s}.workers (id, host, pid, queues, tasks, concurrency, version, interval_ms, visibility_timeout_ms)
        VALUES ('ghost', 'h', 1, '{}', '{}', 1, 'x', 1000, 2000000000)`,
      `INSERT INTO ${db.s}.workers (id, host, pid, queues, tasks, concurrency, version, interval_ms)
        VALUES ('ghost', 'h', 1, '{}', '{}', 1, 'x', 2147483647)`,
      `INSERT INTO ${db.s}.workers (id, host, pid, queues, tasks, concurrency, version, interval_ms, last_seen_at)
        VALUES ('ghost', 'h', 1, '{}', '{}', 1, 'x', 1000, now() + interval '100 years')`,
    ]);
    await db.pool.query(`DELETE FROM ${db.s}.job_groups WHERE queue = 'held'`);
    expect(await snapshot()).toEqual(before);

    // What it may do to a processing job is what a run does: here, finish it.
    const done = await pool.query(
      `UPDATE ${db.s}.jobs SET status = 'completed', result = '1', locked_at = NULL, finished_at = now()
      WHERE id = $1 AND status = 'processing' RETURNING id`,
      [running],
    );
    expect(done.rowCount).toBe(1);
    // And enqueue_job(), for cron ticks; a Queue's plain INSERT is refused.
    await expect(pool.query(`SELECT ${db.s}.enqueue_job('default', '{"task":"t"}')`)).resolves.toBeDefined();
    const queue = new Queue({ pool, schema: db.schema });
    await expect(queue.enqueue('t')).rejects.toMatchObject({ code: 'DATABASE', sqlState: '42501' });
  });

  it('a role granted everything on the table still cannot forge jobs; the owner can', async () => {
    const pool = pools.wide;
    const completed = await ownerInsert({ task: 't', status: 'completed', result: { real: true }, finished_at: new Date() });
    const pending = await ownerInsert({ task: 't' });
    const before = await snapshot();
    await expectRefused(pool, '42501', [
      `INSERT INTO ${db.s}.jobs (task, status, result, finished_at) VALUES ('t', 'completed', '{"forged":true}', now())`,
      `INSERT INTO ${db.s}.jobs (task, status, attempts, job_key, key_scope, locked_at, locked_by)
       VALUES ('t', 'processing', 1, 'blocked-wide-${tag}', 'active', now() + interval '10 years', 'nobody')`,
      [`UPDATE ${db.s}.jobs SET payload = '{"forged":true}' WHERE id = $1`, [completed]],
      [`UPDATE ${db.s}.jobs SET run_at = now() + interval '100 years' WHERE id = $1`, [pending]],
    ]);
    await expect(
      pool.query(`INSERT INTO ${db.s}.jobs (task, payload) VALUES ('t', $1::jsonb)`, [JSON.stringify(BIG)]),
    ).rejects.toMatchObject({ code: '54000' });
    // A plain new job is fine.
    await expect(pool.query(`INSERT INTO ${db.s}.jobs (task) VALUES ('t') RETURNING id`)).resolves.toMatchObject({ rowCount: 1 });
    const after = await snapshot();
    expect((after[0] as { jobs: unknown[] }).jobs.length).toBe((before[0] as { jobs: unknown[] }).jobs.length + 1);

    // The owner (the admin API, tests, repairs) is not held to any of it.
    await db.pool.query(`UPDATE ${db.s}.jobs SET run_at = now() + interval '1 day' WHERE id = $1`, [pending]);
    await db.pool.query(`UPDATE ${db.s}.jobs SET status = 'pending', finished_at = NULL WHERE id = $1`, [completed]);
  });

  // Outside review 156, each through the real executable (dist/), logged in as the roles.
  describe('the CLI and the Worker under these roles', () => {
    it('sluice enqueue as the enqueue role exits 0 with the id: the paused note it may not read is left out', async () => {
      const result = await runCli(urlAs(logins.enqueue), db.schema, ['enqueue', 't', '{"n":1}', '--queue', `cli_${tag}`]);
      expect(result.stderr).toBe('');
      expect(result.code).toBe(0);
      const id = result.stdout.trim();
      const { rows } = await db.pool.query(`SELECT queue FROM ${db.s}.jobs WHERE id = $1`, [id]);
      expect(rows).toEqual([{ queue: `cli_${tag}` }]);
    });

    it('sluice migrate as the enqueue role or the worker role, on an up-to-date schema, is a no-op (outside review 209)', async () => {
      for (const login of [logins.enqueue, logins.worker]) {
        const result = await runCli(urlAs(login), db.schema, ['migrate']);
        expect(result.stderr, login).toBe('');
        expect(result.code, login).toBe(0);
        expect(result.stdout, login).toMatch(/up to date/);
      }
    });

    it('a Worker of the worker role is refused at start on a schema behind the migrations (outside review 172)', async () => {
      const { rows } = await db.pool.query(
        `DELETE FROM ${db.s}.migrations WHERE version = (SELECT max(version) FROM ${db.s}.migrations) RETURNING version, name`,
      );
      try {
        const worker = new Worker({ connectionString: urlAs(logins.worker), schema: db.schema, tasks: { t: () => {} } });
        const started = worker.start();
        await expect(started).rejects.toBeInstanceOf(MigrationError);
        await expect(started).rejects.toThrow(
          `is at migration ${rows[0].version - 1}, and this version of Sluice needs ${rows[0].version}`,
        );
        await worker.stop();
      } finally {
        await db.pool.query(`INSERT INTO ${db.s}.migrations (version, name) VALUES ($1, $2)`, [rows[0].version, rows[0].name]);
      }
    });

    it('a Worker whose role may not claim jobs is refused at start, not left idle', async () => {
      const worker = new Worker({ connectionString: urlAs(logins.enqueue), schema: db.schema, tasks: { t: () => {} } });
      const errors: unknown[] = [];
      worker.on('error', (err) => errors.push(err));
      const started = worker.start();
      await expect(started).rejects.toBeInstanceOf(ConfigError);
      await expect(started).rejects.toThrow(
        `role "${logins.enqueue}" lacks SELECT on jobs, UPDATE (status, attempts, run_at, locked_at, locked_by, started_at, ` +
          'finished_at, updated_at, last_error, errors, result, progress, key_scope) on jobs, SELECT on queues',
      );
      // Outside review 157: a role with part of sluice_worker's grants started and idled for ever.
      const partial = `p_login_${tag}`;
      await db.pool.query(`CREATE ROLE ${partial} LOGIN PASSWORD '${PASSWORD}'`);
      cleanup.push(async () => {
        await db.pool.query(`DROP OWNED BY ${partial}`);
        await db.pool.query(`DROP ROLE ${partial}`);
      });
      await db.pool.query(`GRANT USAGE ON SCHEMA ${db.s} TO ${partial}`);
      await db.pool.query(`GRANT SELECT ON ${db.s}.jobs, ${db.s}.queues TO ${partial}`);
      await db.pool.query(
        `GRANT UPDATE (status, attempts, run_at, locked_at, locked_by, started_at, updated_at) ON ${db.s}.jobs TO ${partial}`,
      );
      // Its maintenance lease and schedules too, when it takes part in them (outside review 159).
      const leaderless = `l_login_${tag}`;
      await db.pool.query(`CREATE ROLE ${leaderless} LOGIN PASSWORD '${PASSWORD}' IN ROLE ${groups.worker}`);
      cleanup.push(async () => {
        await db.pool.query(`DROP OWNED BY ${leaderless}`);
        await db.pool.query(`DROP ROLE ${leaderless}`);
      });
      await db.pool.query(`REVOKE ALL ON ${db.s}.leader, ${db.s}.cron_schedules FROM ${groups.worker}`);
      try {
        const schedules = [{ name: `nightly_${tag}`, cron: '0 3 * * *', task: 't' }];
        const refusedFor = async (options: object) => {
          const w = new Worker({ connectionString: urlAs(leaderless), schema: db.schema, tasks: { t: () => {} }, ...options });
          return w.start().then(
            async () => {
              await w.stop();
              return 'started';
            },
            (err: Error) => err.message,
          );
        };
        expect(await refusedFor({})).toMatch(
          `role "${leaderless}" lacks SELECT on leader, INSERT on leader, UPDATE on leader, DELETE on leader in schema`,
        );
        expect(await refusedFor({ maintenance: false, schedules })).toMatch(
          `role "${leaderless}" lacks SELECT on cron_schedules, INSERT on cron_schedules, UPDATE on cron_schedules in schema`,
        );
        expect(await refusedFor({ maintenance: false })).toBe('started');
        // sluice_worker may not delete jobs (outside review 220: started, every result write refused, each job run again).
        expect(await refusedFor({ maintenance: false, completedJobs: 'delete' })).toBe(
          `role "${leaderless}" lacks DELETE on jobs in schema "${db.schema}": completedJobs 'delete' deletes completed ` +
            `jobs' rows, which sluice_worker may not: GRANT DELETE ON ${db.s}.jobs TO "${leaderless}", or keep completed ` +
            'jobs (the default)',
        );
        await db.pool.query(`GRANT DELETE ON ${db.s}.jobs TO ${leaderless}`);
        expect(await refusedFor({ maintenance: false, completedJobs: 'delete' })).toBe('started');
      } finally {
        await db.pool.query(`GRANT SELECT, INSERT, UPDATE, DELETE ON ${db.s}.leader TO ${groups.worker}`);
        await db.pool.query(`GRANT SELECT, INSERT, UPDATE ON ${db.s}.cron_schedules TO ${groups.worker}`);
      }
      const half = new Worker({ connectionString: urlAs(partial), schema: db.schema, tasks: { t: () => {} } });
      await expect(half.start()).rejects.toThrow(
        `role "${partial}" lacks UPDATE (finished_at, last_error, errors, result, progress, key_scope) on jobs, UPDATE (updated_at, ` +
          'group_cursor, group_turn_taken, tokens, tokens_at) on queues, SELECT on job_groups, INSERT (queue, group_key) on job_groups, UPDATE (tokens, ' +
          'tokens_at) on job_groups, EXECUTE on mark_queue_grouped(text, text), EXECUTE on claim_limited(text, text, text[], ' +
          'integer, bigint[]), EXECUTE on claim_queue(text, text, text[], integer, integer, integer, bigint[]), EXECUTE on ' +
          'running_jobs(text, text, text, bigint[]), EXECUTE on refill_tokens(double precision, timestamptz, integer, integer, ' +
          'integer, timestamptz), EXECUTE on wake_payload(text, timestamptz), SELECT on leader, INSERT on leader, UPDATE on ' +
          `leader, DELETE on leader in schema "${db.schema}": grant it sluice_worker`,
      );
      expect(errors).toEqual([]);
    });

    it('doctor as a role that may not read the schema exits 2 (critical) and says what it needs', async () => {
      const result = await runCli(urlAs(logins.worker), db.schema, ['doctor']);
      expect(result.code).toBe(2);
      expect(result.stdout).toBe('');
      // Whichever check meets the refusal first; outboxLag names itself (outside review 173).
      expect(result.stderr).toMatch(/^sluice: doctor: (outboxLag: )?permission denied for .*run it as the schema's owner/);
    });

    it('an admin command the role may not run says so, whichever table Postgres names', async () => {
      const result = await runCli(urlAs(logins.worker), db.schema, ['queues', 'pause', 'default', '--create']);
      expect(result.code).toBe(1);
      expect(result.stderr).toMatch(
        /permission denied .*\(the role lacks a privilege for this: grant it what its commands need \(sql\/roles.sql\)/,
      );
      // A role that may not use the schema at all: the worker command says so as the Worker does, exit 2 (review 157).
      const none = await runCli(urlAs(logins.none), db.schema, ['worker', '--tasks', `${FIXTURES}cli-tasks.mjs`]);
      expect(none.code).toBe(2);
      expect(none.stderr).toMatch(/^sluice: permission denied for schema .*: grant the role what its commands need/);
      // migrate too (outside review 266: it exited 1).
      const migrateNone = await runCli(urlAs(logins.none), db.schema, ['migrate']);
      expect(migrateNone.code, migrateNone.stderr).toBe(2);
      expect(migrateNone.stderr).toMatch(
        /^sluice: migration setup failed: permission denied for schema .*\(migrate runs as the schema's owner/,
      );
    });

    it("a sluice_worker role's worker left with the pruner on says what to do, and leaves the pruning to one that may (outside reviews 157, 185)", async () => {
      const worker = new Worker({
        connectionString: urlAs(logins.worker),
        schema: db.schema,
        queues: [`refused_${tag}`],
        tasks: { t: () => {} },
        maintenance: { pruner: { delayMs: 0, intervalMs: 100 } },
      });
      const errors: SluiceError[] = [];
      worker.on('error', (err) => errors.push(err));
      await worker.start();
      // The owner's worker, started once the refused one held the pruner's lease: it
      // waited for ever, as the refused one kept the lease and failed.
      const owner = new Worker({
        connectionString: db.url,
        schema: db.schema,
        queues: [`owner_${tag}`],
        tasks: { other: () => {} },
        workerId: `owner-${tag}`,
        maintenance: { pruner: { delayMs: 0, intervalMs: 100 } },
      });
      owner.on('error', () => {});
      try {
        await waitFor(() => errors.find((e) => /pruner/.test(e.message)), 'the pruner refused');
        await owner.start();
        const { rows } = await db.pool.query(`SELECT ${db.s}.enqueue_job($1, '{"task":"t"}') AS id`, [`refused_${tag}`]);
        await waitFor(async () => {
          const r = await db.pool.query(`SELECT 1 FROM ${db.s}.jobs_history WHERE id = $1`, [rows[0].id]);
          return r.rowCount === 1;
        }, "the owner's worker to prune the job");
        expect((await currentLeader(db.pool, db.schema, 'pruner'))?.holder).toBe(`owner-${tag}`);
      } finally {
        await owner.stop();
        await worker.stop();
      }
      const refused = errors.find((e) => /pruner/.test(e.message))!;
      expect(refused.message).toMatch(
        /^worker maintenance: pruner: permission denied .*maintenance: \{ pruner: false \} \(sluice worker --no-pruner\)/,
      );
    });

    it('sluice worker --no-pruner runs jobs as the worker role, without the maintenance error the pruner meets', async () => {
      const queueName = `cliw_${tag}`;
      const worker = spawnCli(['worker', '--tasks', `${FIXTURES}cli-tasks.mjs`, '--json', '--no-pruner', '--queue', queueName], {
        DATABASE_URL: urlAs(logins.worker),
        SLUICE_SCHEMA: db.schema,
      });
      try {
        await waitFor(() => worker.stdout().includes('"event":"started"'), 'the worker to start');
        expect(worker.stdout()).toMatch(/"pruner":"off"/);
        const { rows } = await db.pool.query(`SELECT ${db.s}.enqueue_job($1, '{"task":"hello"}') AS id`, [queueName]);
        await waitFor(async () => {
          const r = await db.pool.query(`SELECT status FROM ${db.s}.jobs WHERE id = $1`, [rows[0].id]);
          return r.rows[0]?.status === 'completed';
        }, 'the job to complete');
      } finally {
        worker.child.kill('SIGTERM');
      }
      const exited = await worker.exited;
      expect(exited.code).toBe(0);
      expect(exited.stderr).not.toMatch(/maintenance/);
    });

    it("prunes from the owner's worker while a --no-pruner worker of the worker role leads (outside review 182)", async () => {
      // The README's setup. With the pruner on the leader, the owner's worker never
      // pruned while the worker role's held the lease.
      const queueName = `prune_${tag}`;
      const noPruner = new Worker({
        connectionString: urlAs(logins.worker),
        schema: db.schema,
        queues: [queueName],
        tasks: { t: () => {} },
        maintenance: { pruner: false },
      });
      const owner = new Worker({
        connectionString: db.url,
        schema: db.schema,
        queues: ['nothing-here'],
        tasks: { other: () => {} },
        maintenance: { pruner: { delayMs: 0, intervalMs: 100 } },
      });
      const errors: Error[] = [];
      for (const w of [noPruner, owner]) w.on('error', (err) => errors.push(err));
      const elected = nextEvent(noPruner, 'leader:elected');
      await noPruner.start();
      await elected;
      await owner.start();
      try {
        const { rows } = await db.pool.query(`SELECT ${db.s}.enqueue_job($1, '{"task":"t"}') AS id`, [queueName]);
        await waitFor(async () => {
          const r = await db.pool.query(`SELECT 1 FROM ${db.s}.jobs_history WHERE id = $1`, [rows[0].id]);
          return r.rowCount === 1;
        }, 'the job to reach the history');
        expect(noPruner.isLeader).toBe(true);
        expect(owner.isLeader).toBe(false);
      } finally {
        await owner.stop();
        await noPruner.stop();
      }
      expect(errors.filter((e) => /pruner|permission/.test(e.message))).toEqual([]);
    });
  });
});
