/**
 * What the pause/limit guard costs the common claim. Fills a scratch schema with
 * N due pending jobs, configures `queues` rows (none, or 50 with half paused plus
 * a paused queue that has a backlog), and runs EXPLAIN ANALYZE of the claim
 * (UPDATE ... FROM (SELECT ... LIMIT 100 FOR UPDATE SKIP LOCKED)) with the guard
 * in four places: none, inside the SELECT as `<> ALL (ARRAY(...))` or as NOT
 * EXISTS (both tried first), and on the outer UPDATE (as shipped). Prints what
 * feeds the SELECT's LIMIT and the median execution time.
 *
 *   DATABASE_URL=postgres://... node --import tsx bench/claim-guard.ts [rows=200000]
 */
import pg from 'pg';
import { migrate } from '../src/migrate.js';
import { quoteSchema } from '../src/db/identifiers.js';

const url = process.env.DATABASE_URL;
if (!url) throw new Error('set DATABASE_URL');
const total = Number(process.argv[2] ?? 200_000);
const schema = `bench_guard_${process.pid}`;
const s = quoteSchema(schema);
const pool = new pg.Pool({ connectionString: url, max: 1 });

const skipped = `ARRAY(SELECT name FROM ${s}.queues WHERE paused OR concurrency_limit IS NOT NULL)`;
/** [guard inside the SELECT, guard on the outer UPDATE] */
const guards: Record<string, [string, string]> = {
  'no guard': ['', ''],
  'SELECT: <> ALL (ARRAY(...))': [`AND queue <> ALL (${skipped})`, ''],
  'SELECT: NOT EXISTS': [`AND NOT EXISTS (SELECT 1 FROM ${s}.queues qc
    WHERE qc.name = ${s}.jobs.queue AND (qc.paused OR qc.concurrency_limit IS NOT NULL))`, ''],
  'UPDATE: <> ALL (ARRAY(...))': ['', `AND j.queue <> ALL (${skipped})`],
};

async function explain(queueFilter: string, [inner, outer]: [string, string]): Promise<{ node: string; ms: number }> {
  const client = await pool.connect();
  const times: number[] = [];
  let node = '';
  try {
    for (let i = 0; i < 7; i++) {
      await client.query('BEGIN');
      const { rows } = await client.query<{ 'QUERY PLAN': unknown }>(`EXPLAIN (ANALYZE, FORMAT JSON)
        UPDATE ${s}.jobs j SET status = 'processing', attempts = j.attempts + 1, locked_at = now()
        FROM (
          SELECT id FROM ${s}.jobs
          WHERE status = 'pending' AND ${queueFilter} AND task = ANY($2::text[]) AND run_at <= now() ${inner}
          ORDER BY priority DESC, run_at, id LIMIT 100 FOR UPDATE SKIP LOCKED
        ) c
        WHERE j.id = c.id ${outer}`, [queueFilter.includes('ANY') ? ['default'] : 'default', ['t']]);
      await client.query('ROLLBACK');
      const plan = (rows[0]!['QUERY PLAN'] as [{ Plan: PlanNode; 'Execution Time': number }])[0];
      times.push(plan['Execution Time']);
      node = scanOf(plan.Plan);
    }
  } finally {
    client.release();
  }
  times.sort((a, b) => a - b);
  return { node, ms: times[3]! };
}

interface PlanNode {
  'Node Type': string;
  'Parent Relationship'?: string;
  'Index Name'?: string;
  Plans?: PlanNode[];
}

/** What feeds the SELECT's Limit/LockRows (InitPlans aside): an index scan in order, or a sort over something. */
function scanOf(plan: PlanNode, inLimit = false): string {
  const children = (plan.Plans ?? []).filter((p) => p['Parent Relationship'] !== 'InitPlan');
  if (plan['Node Type'] === 'Limit' || plan['Node Type'] === 'LockRows') return scanOf(children[0]!, true);
  if (!inLimit) {
    for (const child of children) {
      const found = scanOf(child);
      if (found) return found;
    }
    return '';
  }
  if (plan['Node Type'] === 'Sort') return `Sort over ${scanOf(children[0]!, true)}`;
  return plan['Index Name'] ? `${plan['Node Type']} using ${plan['Index Name']}` : plan['Node Type'];
}

try {
  await migrate({ connectionString: url, schema });
  await pool.query(`INSERT INTO ${s}.jobs (queue, task, run_at)
    SELECT CASE WHEN i % 10 = 0 THEN 'other' ELSE 'default' END, 't', now() - interval '1 hour' + i * interval '1 ms'
    FROM generate_series(1, $1) i`, [total]);
  await pool.query(`VACUUM ANALYZE ${s}.jobs`);
  const { rows } = await pool.query<{ server_version: string }>('SHOW server_version');
  console.log(`PostgreSQL ${rows[0]!.server_version}, ${total} due pending jobs (90% in 'default'), claims of 100 from 'default'`);
  for (const state of ['empty queues table', '51 queues rows (26 paused, incl. "other")']) {
    if (state !== 'empty queues table') {
      await pool.query(`INSERT INTO ${s}.queues (name, paused) SELECT 'q' || i, i % 2 = 0 FROM generate_series(1, 50) i`);
      await pool.query(`INSERT INTO ${s}.queues (name, paused) VALUES ('other', true)`);
      await pool.query(`ANALYZE ${s}.queues`);
    }
    console.log(`\n${state}`);
    // The claim sends its queues as an array; `= $1` is the form a planner can
    // walk jobs_dequeue_idx in order with on every Postgres version.
    for (const queueFilter of ['queue = ANY($1::text[])', 'queue = $1::text']) {
      for (const [name, guard] of Object.entries(guards)) {
        const { node, ms } = await explain(queueFilter, guard);
        console.log(`  ${queueFilter.padEnd(24)} ${name.padEnd(28)} ${node.padEnd(40)} median ${ms.toFixed(2)} ms`);
      }
    }
  }
} finally {
  await pool.query(`DROP SCHEMA IF EXISTS ${s} CASCADE`);
  await pool.end();
}
