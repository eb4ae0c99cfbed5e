import pg from 'pg';
import type { BenchContext, ScenarioResult } from '../lib/context.js';
import { migratedSchema } from '../lib/database.js';
import { now } from '../lib/clock.js';
import { rate } from '../lib/stats.js';

/**
 * What Postgres itself can do on this machine, without Sluice or a job handler:
 * `sqlClients` connections each loop "claim up to `sqlBatch` pending jobs with
 * SKIP LOCKED" then "complete them with one UPDATE ... WHERE id = ANY", two
 * statements and two commits per batch, until the table is drained. Sluice's
 * drain figures are printed as a share of this.
 */
export async function sqlLimit(ctx: BenchContext): Promise<ScenarioResult & { limits: Map<number, number> }> {
  const { sizes } = ctx;
  const limits = new Map<number, number>();
  const details: Record<string, unknown> = {};
  for (const size of sizes.drainSizes) {
    const db = await migratedSchema(ctx.url, 'sql');
    try {
      await db.pool.query(
        `INSERT INTO ${db.s}.jobs (task, payload) SELECT 'noop', jsonb_build_object('i', g) FROM generate_series(0, $1 - 1) g`, [size]);
      await db.pool.query(`ANALYZE ${db.s}.jobs`);
      const claim = `UPDATE ${db.s}.jobs j
        SET status = 'processing', attempts = j.attempts + 1, locked_at = now(), locked_by = $1, updated_at = now()
        FROM (SELECT id FROM ${db.s}.jobs
              WHERE status = 'pending' AND queue = 'default' AND run_at <= now()
              ORDER BY priority DESC, run_at, id LIMIT $2 FOR UPDATE SKIP LOCKED) c
        WHERE j.id = c.id RETURNING j.id`;
      const complete = `UPDATE ${db.s}.jobs
        SET status = 'completed', locked_at = NULL, finished_at = now(), updated_at = now()
        WHERE id = ANY($1::bigint[]) AND status = 'processing' AND locked_by = $2`;
      const clients = await Promise.all(Array.from({ length: sizes.sqlClients }, async (_, i) => {
        const client = new pg.Client({ connectionString: ctx.url, application_name: 'sluice-bench-sql' });
        await client.connect();
        return { client, name: `sql-${i}` };
      }));
      let done = 0;
      const started = now();
      await Promise.all(clients.map(async ({ client, name }) => {
        for (;;) {
          const claimed = await client.query<{ id: string }>({ name: 'claim', text: claim, values: [name, sizes.sqlBatch] });
          if (claimed.rows.length === 0) return;
          await client.query({ name: 'complete', text: complete, values: [claimed.rows.map((r) => r.id), name] });
          done += claimed.rows.length;
        }
      }));
      const elapsedMs = now() - started;
      await Promise.all(clients.map(({ client }) => client.end()));
      const jobsPerSec = rate(done, elapsedMs);
      limits.set(size, jobsPerSec);
      details[String(size)] = { jobs: done, elapsedMs, jobsPerSec };
      ctx.log(`sql limit, ${size} jobs: ${jobsPerSec} jobs/s`);
    } finally {
      await db.drop();
    }
  }
  return {
    limits,
    details: { clients: sizes.sqlClients, batch: sizes.sqlBatch, bySize: details },
    rows: [...limits].map(([size, value]) => ({
      scenario: 'sql-only limit', metric: `claim ${sizes.sqlBatch} + complete, ${sizes.sqlClients} conns, ${size} jobs`,
      value, unit: 'jobs/s', vsLimitAt: size,
    })),
  };
}
