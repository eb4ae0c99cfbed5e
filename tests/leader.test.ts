import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { ConfigError, Queue } from '../src/index.js';
import { Lease, currentLeader } from '../src/maintenance/lease.js';
import { MaintenanceRunner, type PeriodicTask } from '../src/maintenance/runner.js';
import { maintenanceStatements } from '../src/db/statements/maintenance.js';
import { createTestSchema, nextEvent, waitFor, type TestDatabase } from './helpers/database.js';
import { spawnWorker, type WorkerProcess } from './helpers/processes.js';

let db: TestDatabase;
const children: WorkerProcess[] = [];

beforeAll(async () => {
  db = await createTestSchema('leader');
  await db.pool.query(`CREATE TABLE ${db.s}.runs (job_id bigint PRIMARY KEY, worker text NOT NULL)`);
  await db.pool.query(
    `CREATE TABLE ${db.s}.started (job_id bigint, worker text NOT NULL, at timestamptz DEFAULT clock_timestamp())`,
  );
});
afterAll(async () => {
  for (const c of children) if (c.child.exitCode === null) c.child.kill('SIGKILL');
  await db.drop();
});

describe('maintenance leader', () => {
  it('of many workers racing on separate connections, exactly one holds the lease', async () => {
    const queries = maintenanceStatements(db.schema);
    const clients = await Promise.all(
      Array.from({ length: 6 }, async () => {
        const c = new pg.Client({ connectionString: db.url });
        await c.connect();
        return c;
      }),
    );
    try {
      const leases = clients.map((c, i) => new Lease(c, queries, `racer-${i}`, 60_000, 'race'));
      const won = await Promise.all(leases.map((l) => l.tryAcquire()));
      expect(won.filter(Boolean)).toHaveLength(1);
      const winner = leases[won.indexOf(true)]!;
      expect((await currentLeader(db.pool, queries, 'race'))?.holder).toBe(winner.holderId);
      // Renewal keeps it; the others still lose while it is live.
      expect(await winner.tryAcquire()).toBe(true);
      const loser = leases.find((l) => l !== winner)!;
      expect(await loser.tryAcquire()).toBe(false);
      // A resignation hands it over at once.
      await winner.resign();
      expect(await loser.tryAcquire()).toBe(true);
    } finally {
      await Promise.all(clients.map((c) => c.end()));
    }
  });

  it('runs periodic tasks only while leading, and stops them when the lease is lost', async () => {
    const queries = maintenanceStatements(db.schema);
    let runs = 0;
    const task: PeriodicTask = { name: 'count', intervalMs: 20, run: async () => void runs++ };
    const runner = new MaintenanceRunner(new Lease(db.pool, queries, 'solo', 900, 'tasks'), [task]);
    const elected = nextEvent(runner, 'leader:elected');
    runner.start();
    await elected;
    await waitFor(() => runs >= 3, 'the task to run a few times');
    // Someone else takes the lease (as if ours had expired): the runner steps down.
    const lost = nextEvent(runner, 'leader:lost');
    await db.pool.query(`UPDATE ${db.s}.leader SET holder = 'usurper' WHERE role = 'tasks'`);
    await lost;
    expect(runner.isLeader).toBe(false);
    const after = runs;
    await runner.stop();
    // The usurper's row is not ours to delete on stop.
    expect((await currentLeader(db.pool, queries, 'tasks'))?.holder).toBe('usurper');
    expect(runs - after).toBeLessThanOrEqual(1); // at most the run that was already in flight
  });

  it('when the leader process is SIGKILLed another takes over within the lease and rescues its jobs', async () => {
    const queries = maintenanceStatements(db.schema);
    const leaseMs = 1_500;
    const env = (name: string) => ({
      DATABASE_URL: db.url,
      SLUICE_SCHEMA: db.schema,
      WORKER_NAME: name,
      CONCURRENCY: '1',
      VISIBILITY_MS: '2000',
      LEASE_MS: String(leaseMs),
      QUEUES: 'failover',
      SHUTDOWN_MS: '200',
    });
    const procs = new Map<string, WorkerProcess>();
    for (const name of ['alpha', 'beta']) {
      const p = await spawnWorker(env(name));
      children.push(p);
      procs.set(name, p);
    }
    const first = await waitFor(async () => {
      const lease = await currentLeader(db.pool, queries);
      return lease?.live ? lease : undefined;
    }, 'a leader to be elected');
    const leader = first.holder;
    const survivor = leader === 'alpha' ? 'beta' : 'alpha';
    // The schema's name does as well as its statements (outside review 164: a name threw pg's "null or undefined query").
    expect((await currentLeader(db.pool, db.schema))?.holder).toBe(leader);
    // A schema never migrated, or no schema: Sluice's errors, as the admin API's (outside review 165).
    await expect(currentLeader(db.pool, 'no_such_schema_here')).rejects.toMatchObject({ code: 'DATABASE' });
    await expect(currentLeader(db.pool, 'no_such_schema_here')).rejects.toThrow(/sluice migrate/);
    await expect(currentLeader(db.pool, undefined as never)).rejects.toBeInstanceOf(ConfigError);

    // Give each worker (concurrency 1) a job that hangs, so the leader dies holding one.
    const queue = new Queue({ pool: db.pool, schema: db.schema });
    const ids = await queue.enqueueMany([
      { task: 'hang', queue: 'failover' },
      { task: 'hang', queue: 'failover' },
    ]);
    const held = await waitFor(async () => {
      const { rows } = await db.pool.query(`SELECT job_id::text AS id, worker FROM ${db.s}.started`);
      return rows.length === 2 ? new Map(rows.map((r) => [r.worker as string, r.id as string])) : undefined;
    }, 'both workers to start a job');

    procs.get(leader)!.child.kill('SIGKILL');
    expect(await procs.get(leader)!.exited).toBe('SIGKILL');
    const { rows: before } = await db.pool.query(`SELECT expires_at FROM ${db.s}.leader WHERE role = 'maintenance'`);

    // Within the lease (plus one renewal interval) the survivor holds it.
    const next = await waitFor(
      async () => {
        const lease = await currentLeader(db.pool, queries);
        return lease?.holder === survivor && lease.live ? lease : undefined;
      },
      'the survivor to take over the lease',
      leaseMs * 4,
    );
    // Never two leaders: the new term starts only after the dead leader's lease ran out.
    expect(next.elected_at.getTime()).toBeGreaterThanOrEqual(before[0].expires_at.getTime());

    // The new leader runs the rescuer: the dead leader's job goes back to pending.
    const orphan = held.get(leader)!;
    const rescued = await waitFor(
      async () => {
        const job = await queue.getJob(orphan);
        return job?.status === 'pending' ? job : undefined;
      },
      "the dead leader's job to be rescued",
      15_000,
    );
    expect(rescued.last_error).toMatch(new RegExp(`lock expired: worker ${leader}`));
    expect(ids).toContain(orphan);

    procs.get(survivor)!.child.kill('SIGTERM');
    expect(await procs.get(survivor)!.exited).toBe(0);
    // A clean stop resigns: no live leader is left behind.
    expect(await currentLeader(db.pool, queries)).toBeUndefined();
    await queue.close();
  });
});
