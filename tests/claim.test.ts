import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Queue, Worker } from '../src/index.js';
import { workerStatements } from '../src/db/statements/worker.js';
import { createTestSchema, waitFor, type TestDatabase } from './helpers/database.js';

let db: TestDatabase;
let queue: Queue;
let schemaName: string;

beforeAll(async () => {
  db = await createTestSchema('claim');
  schemaName = db.schema;
  queue = new Queue({ pool: db.pool, schema: db.schema });
});
afterAll(async () => {
  await queue.close();
  await db.drop();
});

/**
 * Runs the worker's cycle statement with no results to write, so it only claims.
 * The statement always returns one row of write results; claimed jobs have an id.
 */
async function claim(
  db: { query(text: string, values: unknown[]): Promise<{ rows: any[] }> },
  workerId: string,
  queues: string[],
  tasks: string[],
  limit: number,
): Promise<any[]> {
  const { rows } = await db.query(workerStatements(schemaName).cycle, claimParams(workerId, queues, tasks, limit));
  return rows.filter((r) => r.id !== null);
}

function claimParams(workerId: string, queues: string[], tasks: string[], limit: number): unknown[] {
  return [workerId, [], [], [], [], [], [], [], queues, tasks, limit, [], 'unused', [], limit, [], [], [], [], []];
}

describe('claiming', () => {
  it('two open transactions claim different rows and neither waits for the other', async () => {
    await queue.enqueueMany([1, 2, 3].map((i) => ({ task: 'demo', queue: 'two-sessions', payload: { i } })));
    const a = await db.pool.connect();
    const b = await db.pool.connect();
    try {
      // If the second claim waited on the first one's row locks, it would hit this
      // timeout instead of returning: SKIP LOCKED is what lets it pass.
      await a.query("BEGIN; SET LOCAL lock_timeout = '2s'");
      await b.query("BEGIN; SET LOCAL lock_timeout = '2s'");
      const first = await claim(a, 'A', ['two-sessions'], ['demo'], 1);
      const second = await claim(b, 'B', ['two-sessions'], ['demo'], 1);
      expect(first).toHaveLength(1);
      expect(second).toHaveLength(1);
      expect(first[0].id).not.toBe(second[0].id);
      // The first session's uncommitted claim is invisible to others: its row is still pending for them.
      const third = await claim(b, 'B', ['two-sessions'], ['demo'], 5);
      expect(third.map((r) => r.id)).not.toContain(first[0].id);
      expect(third).toHaveLength(1);
      await a.query('COMMIT');
      await b.query('COMMIT');
    } finally {
      a.release();
      b.release();
    }
    const { rows } = await db.pool.query(
      `SELECT locked_by, count(*)::int AS n FROM ${db.s}.jobs WHERE queue = 'two-sessions' GROUP BY locked_by ORDER BY 1`,
    );
    expect(rows).toEqual([
      { locked_by: 'A', n: 1 },
      { locked_by: 'B', n: 2 },
    ]);
  });

  it('a claim of several queues locks only the rows it takes: a claim beside it gets the next job (outside review 135)', async () => {
    await queue.enqueueMany(['pair-a', 'pair-b'].map((q) => ({ task: 'demo', queue: q })));
    const a = await db.pool.connect();
    const b = await db.pool.connect();
    const many = async (client: typeof a, worker: string) => {
      const params = claimParams(worker, ['pair-a', 'pair-b'], ['demo'], 1);
      const { rows } = await client.query(workerStatements(schemaName).cycleManyQueues, params);
      return rows.filter((r) => r.id !== null).map((r) => r.queue as string);
    };
    try {
      await a.query('BEGIN');
      await b.query('BEGIN');
      const first = await many(a, 'A');
      // Before, each queue's scan locked its own first row, and the one the merge
      // dropped stayed locked: this claim skipped it and came back empty.
      const second = await many(b, 'B');
      expect([...first, ...second].sort()).toEqual(['pair-a', 'pair-b']);
      await a.query('COMMIT');
      await b.query('COMMIT');
    } finally {
      a.release();
      b.release();
    }
  });

  it('claims of several queues at the same moment go on past the candidates the others locked (outside review 136)', async () => {
    // Each queue offers 2 x 4 + 16 = 24 candidates to a claim of 4: the seventh claim
    // of 4 in open transactions finds all of them locked, and must take the next ones.
    const ids = await queue.enqueueMany(Array.from({ length: 40 }, () => ({ task: 'demo', queue: 'herd-a' })));
    const clients = await Promise.all(Array.from({ length: 7 }, () => db.pool.connect()));
    try {
      const claimed: string[] = [];
      for (const [i, client] of clients.entries()) {
        await client.query('BEGIN');
        const params = claimParams(`W${i}`, ['herd-a', 'herd-b'], ['demo'], 4);
        const { rows } = await client.query(workerStatements(schemaName).cycleManyQueues, params);
        claimed.push(...rows.filter((r) => r.id !== null).map((r) => String(r.id)));
      }
      // Before, the last claim came back empty, and its worker waited for the next poll.
      expect(new Set(claimed).size).toBe(28);
      // In claim order: the first 28 enqueued.
      expect(claimed.sort((x, y) => Number(x) - Number(y))).toEqual(ids.slice(0, 28));
      for (const client of clients) await client.query('COMMIT');
    } finally {
      for (const client of clients) client.release();
    }
  });

  it('claims by priority, then run_at, then id, and never jobs that are not due', async () => {
    const past = (s: number) => new Date(Date.now() - s * 1000);
    await queue.enqueue('p', { name: 'old-low' }, { queue: 'order', runAt: past(30), priority: 0 });
    await queue.enqueue('p', { name: 'new-high' }, { queue: 'order', runAt: past(1), priority: 5 });
    await queue.enqueue('p', { name: 'older-low' }, { queue: 'order', runAt: past(60), priority: 0 });
    await queue.enqueue('p', { name: 'future-high' }, { queue: 'order', delayMs: 60_000, priority: 10 });
    const rows = await claim(db.pool, 'W', ['order'], ['p'], 10);
    // RETURNING order is not guaranteed; the claim order shows in which rows a limit takes.
    expect(rows.map((r) => r.payload.name).sort()).toEqual(['new-high', 'old-low', 'older-low']);
    await db.pool.query(`UPDATE ${db.s}.jobs SET status = 'pending', attempts = 0 WHERE queue = 'order'`);
    const one = await claim(db.pool, 'W', ['order'], ['p'], 1);
    expect(one.map((r) => r.payload.name)).toEqual(['new-high']);
    const two = await claim(db.pool, 'W', ['order'], ['p'], 1);
    expect(two.map((r) => r.payload.name)).toEqual(['older-low']);
    const three = await claim(db.pool, 'W', ['order'], ['p'], 1);
    expect(three.map((r) => r.payload.name)).toEqual(['old-low']);
    expect(await claim(db.pool, 'W', ['order'], ['p'], 1)).toEqual([]);
  });

  it('claims only tasks it knows and only from its queues', async () => {
    await queue.enqueue('known', {}, { queue: 'filter' });
    await queue.enqueue('unknown', {}, { queue: 'filter' });
    await queue.enqueue('known', {}, { queue: 'other' });
    const rows = await claim(db.pool, 'W', ['filter'], ['known'], 10);
    expect(rows.map((r) => [r.task, r.queue])).toEqual([['known', 'filter']]);
    // The statement returns what differs per job, and the claim's time once (the
    // worker fills in the rest); the row itself holds the claim.
    expect(rows[0]).toMatchObject({ attempts: 1, started: true });
    expect(rows[0].claimed_at).toBeInstanceOf(Date);
    const { rows: stored } = await db.pool.query(
      `SELECT status, locked_by, locked_at, started_at FROM ${db.s}.jobs WHERE id = $1`,
      [rows[0].id],
    );
    expect(stored[0]).toMatchObject({ status: 'processing', locked_by: 'W' });
    expect(stored[0].locked_at.getTime()).toBe(rows[0].claimed_at.getTime());
    expect(stored[0].started_at.getTime()).toBe(rows[0].claimed_at.getTime());
  });

  it('three workers take jobs in priority, then run_at, then id order', async () => {
    // 90 due jobs, enqueued before any worker runs, priorities shuffled against run_at.
    const specs = Array.from({ length: 90 }, (_, i) => ({
      task: 'ordered',
      queue: 'priorities',
      payload: { i },
      priority: (i * 7) % 5,
      runAt: new Date(Date.now() - 60_000 + i * 10),
    }));
    await queue.enqueueMany(specs);
    interface Seen {
      id: string;
      key: [number, number, bigint];
      claimedAt: number;
      observedAt: number;
    }
    const seen: Seen[] = [];
    const workers = Array.from(
      { length: 3 },
      () =>
        new Worker({
          // One job per claim (no claiming ahead), so that claims interleave in time.
          connectionString: db.url,
          schema: schemaName,
          queues: ['priorities'],
          concurrency: 1,
          prefetch: 0,
          tasks: {
            ordered: async (_p, { job }) => {
              // claimedAt: when the claiming statement began (locked_at = now()); observedAt:
              // a moment after it committed. Both on the database clock.
              const { rows } = await db.pool.query('SELECT clock_timestamp() AS t');
              seen.push({
                id: job.id,
                key: [-job.priority, job.run_at.getTime(), BigInt(job.id)],
                claimedAt: job.locked_at!.getTime(),
                observedAt: rows[0].t.getTime(),
              });
            },
          },
        }),
    );
    try {
      for (const w of workers) w.on('error', () => {});
      await Promise.all(workers.map((w) => w.start()));
      await waitFor(() => seen.length === 90, 'all jobs to run');
    } finally {
      await Promise.all(workers.map((w) => w.stop()));
    }
    // A claim that began after another claim had committed could also have taken that
    // one's job, so it must not have taken a better one. (Claims that overlap in time
    // may take neighbouring jobs in either order: that is SKIP LOCKED at work.)
    const before = (a: Seen['key'], b: Seen['key']) => (a[0] !== b[0] ? a[0] < b[0] : a[1] !== b[1] ? a[1] < b[1] : a[2] < b[2]);
    let compared = 0;
    for (const a of seen) {
      for (const b of seen) {
        if (b.claimedAt <= a.observedAt) continue;
        compared++;
        expect(before(b.key, a.key), `job ${b.id} claimed after job ${a.id} but ranks before it`).toBe(false);
      }
    }
    // Most pairs are ordered in time, so the check above covers nearly all of them.
    expect(compared).toBeGreaterThan(3_000);
  });

  it('claims of many queues offer the first candidates of all, and go on past them when others locked those (outside review 255)', async () => {
    // 10 queues x 20 jobs, claims of 4: each queue offers all its 20 as candidates
    // (up to 24), 200 in all, of which the first 24 in claim order are offered; six
    // claims lock those, and the seventh must take the next ones from the queues' own scans.
    const names = Array.from({ length: 10 }, (_, i) => `wide-${i}`);
    const ids = await queue.enqueueMany(
      Array.from({ length: 200 }, (_, i) => ({ task: 'demo', queue: names[i % 10]!, runAt: new Date(Date.now() - 300_000 + i) })),
    );
    const clients = await Promise.all(Array.from({ length: 7 }, () => db.pool.connect()));
    try {
      const claimed: string[] = [];
      for (const [i, client] of clients.entries()) {
        await client.query('BEGIN');
        const { rows } = await client.query(
          workerStatements(schemaName).cycleManyQueues,
          claimParams(`V${i}`, names, ['demo'], 4),
        );
        claimed.push(...rows.filter((r) => r.id !== null).map((r) => String(r.id)));
      }
      expect(claimed.sort((x, y) => Number(x) - Number(y))).toEqual(ids.slice(0, 28));
      for (const client of clients) await client.query('COMMIT');
    } finally {
      for (const client of clients) client.release();
    }
  });

  it('a worker of several queues claims across them in priority, then run_at, then id order', async () => {
    const past = (s: number) => new Date(Date.now() - s * 1000);
    const jobs = [
      ['a-old', 'merge-a', 60, 0],
      ['b-high', 'merge-b', 1, 5],
      ['a-high-older', 'merge-a', 10, 5],
      ['b-older', 'merge-b', 90, 0],
      ['c-elsewhere', 'merge-c', 120, 9],
    ] as const;
    for (const [name, q, ago, priority] of jobs) await queue.enqueue('p', { name }, { queue: q, runAt: past(ago), priority });
    const many = (limit: number) =>
      db.pool
        .query(workerStatements(schemaName).cycleManyQueues, claimParams('W', ['merge-a', 'merge-b'], ['p'], limit))
        .then(({ rows }) => rows.filter((r) => r.id !== null).map((r) => r.payload.name as string));
    expect(await many(2)).toEqual(expect.arrayContaining(['a-high-older', 'b-high']));
    expect(await many(1)).toEqual(['b-older']);
    expect(await many(5)).toEqual(['a-old']);
    expect(await many(5)).toEqual([]);
  });

  it("the worker's claim is one ordered scan of jobs_dequeue_idx on a real backlog (custom and generic plans)", async () => {
    // Its own schema: 20,000 due jobs of mixed priority beside 20,000 finished ones,
    // analysed, no planner settings changed: the plan a busy worker really gets.
    const big = await createTestSchema('claimplan');
    try {
      await big.pool.query(`INSERT INTO ${big.s}.jobs (task, priority, run_at)
        SELECT 'demo', i % 7, now() - i * interval '1 second' FROM generate_series(1, 20000) i`);
      await big.pool.query(`INSERT INTO ${big.s}.jobs (task, status) SELECT 'demo', 'completed' FROM generate_series(1, 20000)`);
      await big.pool.query(`ANALYZE ${big.s}.jobs`);
      const client = await big.pool.connect();
      try {
        for (const mode of ['auto', 'force_generic_plan']) {
          await client.query(`SET plan_cache_mode = ${mode}`);
          const explain = async (statement: string, queues: string[]) => {
            const { rows } = await client.query(`EXPLAIN ${statement}`, claimParams('W', queues, ['demo'], 10));
            return rows.map((r) => r['QUERY PLAN']).join('\n');
          };
          const plan = await explain(workerStatements(big.schema).cycle, ['default']);
          expect(plan, plan).toMatch(/Index Scan using jobs_dequeue_idx/);
          // Ordered by the index, stopped by the LIMIT: no sort of the backlog, no full
          // scan. The only sort is of the claimed rows, back into claim order.
          const sorts = plan.split('\n').filter((line) => /Sort/.test(line));
          expect(
            sorts.every((line) => /Sort\s+\(|Sort Key: (claimed\.)?claim_order|Sort Key: \(row_number|Sort Key: c\.n/.test(line)),
            plan,
          ).toBe(true);
          expect(plan, plan).not.toMatch(/Sort Key: .*(priority|run_at)/);
          expect(plan, plan).not.toMatch(/Seq Scan on jobs/);
          // Several queues (outside review 134): the same ordered scan per queue, each
          // stopped by its limit; what they found is sorted, not the backlog.
          const many = await explain(workerStatements(big.schema).cycleManyQueues, ['default', 'other']);
          expect(many, many).toMatch(/Index Scan using jobs_dequeue_idx[^\n]*\n\s*Index Cond: \(queue = q\.name\)/);
          expect(many, many).not.toMatch(/queue = ANY/);
          expect(many, many).not.toMatch(/Seq Scan on jobs/);
        }
      } finally {
        client.release();
      }
    } finally {
      await big.drop();
    }
  });

  it('a claim of several queues reads only its candidates under the generic plan of a never-analysed table (outside review 255)', async () => {
    // The generic plan of "id = ANY(offer) ... ORDER BY ... FOR UPDATE" read every
    // pending row of jobs_dequeue_idx to find the offered ones while the table had no
    // statistics: ~300 ms a claim behind 20,000 jobs, where a worker of one queue took a few.
    const fresh = await createTestSchema('claimfresh');
    try {
      await fresh.pool.query(`INSERT INTO ${fresh.s}.jobs (queue, task, run_at)
        SELECT 'p', 'demo', now() - i * interval '1 millisecond' FROM generate_series(1, 20000) i`);
      const client = await fresh.pool.connect();
      try {
        await client.query('SET plan_cache_mode = force_generic_plan');
        await client.query('BEGIN');
        for (const statement of [
          workerStatements(fresh.schema).cycleManyQueues,
          workerStatements(fresh.schema).claimManyQueues,
        ]) {
          const params = statement.includes('$20')
            ? claimParams('W', ['x', 'p'], ['demo'], 10)
            : ['W', ['x', 'p'], ['demo'], 10, 10];
          const { rows } = await client.query(`EXPLAIN ${statement}`, params);
          const plan = rows.map((r) => r['QUERY PLAN']).join('\n');
          // Every walk of the dequeue index is one queue's, stopped by its limit; the
          // offered rows are found by primary key (before: "Index Cond: (id = ANY ($40))"
          // on jobs_dequeue_idx, every pending row of every queue read).
          const conditions = [...plan.matchAll(/jobs_dequeue_idx[^\n]*\n\s*Index Cond: ([^\n]*)/g)].map((m) => m[1]);
          expect(conditions.length, plan).toBeGreaterThan(0);
          for (const condition of conditions) expect(condition, plan).toMatch(/^\(queue = /);
          expect(plan, plan).toMatch(/jobs_pkey[^\n]*\n\s*Index Cond: \(id = \w+\.id\)/);
        }
        await client.query('ROLLBACK');
      } finally {
        // Closed, not put back: a failed assertion leaves its transaction open, and the
        // schema's DROP waited on its locks.
        client.release(true);
      }
    } finally {
      await fresh.drop();
    }
  });

  it('uses the partial dequeue index for the claim scan', async () => {
    await db.pool.query(`ANALYZE ${db.s}.jobs`);
    const client = await db.pool.connect();
    try {
      await client.query('SET enable_seqscan = off');
      const { rows } = await client.query(
        `EXPLAIN SELECT id FROM ${db.s}.jobs WHERE status = 'pending' AND queue = ($1::text[])[1] AND task = ANY($2::text[])
         AND run_at <= now() ORDER BY priority DESC, run_at, id LIMIT 10 FOR UPDATE SKIP LOCKED`,
        [['default'], ['x']],
      );
      // The claim's scan, as one queue's worker sends it: in claim order straight
      // from the index (jobs_group_dequeue_idx, with the group between queue and
      // priority, would need a sort).
      const plan = rows.map((r) => r['QUERY PLAN']).join('\n');
      expect(plan).toContain('jobs_dequeue_idx');
      expect(plan).not.toMatch(/Sort/);
    } finally {
      client.release();
    }
  });
});
