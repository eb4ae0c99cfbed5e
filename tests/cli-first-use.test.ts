/**
 * What a first-time user of the `sluice` executable reads (issue 15): a schedule
 * that never ticked, a completed job that failed before, one time format in
 * every command and in --json, and stats that still count jobs the pruner moved
 * to jobs_history. Real processes (node bin/sluice.js), real Postgres, this
 * file's own schema.
 */
import { describe, expect, it } from 'vitest';
import { buildMaintenanceQueries, prune, resolvePrunerConfig, Worker } from '../src/index.js';
import { waitFor } from './helpers/database.js';
import { cliSchema, ISO_UTC } from './helpers/cli.js';

const fx = cliSchema('cli_first');
const sluice = fx.sluice;

/** The cells of the table line that starts with `first` (columns are two or more spaces apart). */
function row(table: string, first: string): string[] {
  const line = table.split('\n').find((l) => l.startsWith(`${first} `));
  expect(line, `a line for ${first} in\n${table}`).toBeDefined();
  return line!.split(/ {2,}/);
}

describe('cron list', () => {
  it('shows no last tick for a schedule that never ticked, and the tick once there is one', async () => {
    const worker = new Worker({
      pool: fx.db.pool,
      schema: fx.db.schema,
      queues: ['cron-first'],
      tasks: { report: async () => {} },
      // Once a year: it does not tick while the test runs.
      schedules: [{ name: 'yearly', cron: '0 0 1 1 *', task: 'report', queue: 'cron-first' }],
    });
    worker.on('error', () => {});
    await worker.start();
    try {
      await waitFor(async () => {
        const { rows } = await fx.db.pool.query(`SELECT 1 FROM ${fx.db.s}.cron_schedules WHERE name = 'yearly'`);
        return rows.length === 1;
      }, 'the schedule to be registered');
    } finally {
      await worker.stop();
    }

    const text = await sluice('cron', 'list');
    expect(text.code, text.stderr).toBe(0);
    const [name, , , , lastTick, nextRun] = row(text.stdout, 'yearly');
    expect(name).toBe('yearly');
    expect(lastTick).toBe('-');
    expect(nextRun).toMatch(/^\d{4}-01-01T00:00:00\.000Z$/);
    const [listed] = JSON.parse((await sluice('cron', 'list', '--json')).stdout) as { lastTick: string | null }[];
    expect(listed!.lastTick).toBeNull();

    // As the worker's advance statement leaves it after enqueueing a tick.
    await fx.db.pool.query(`UPDATE ${fx.db.s}.cron_schedules SET last_tick = '2026-01-01T00:00:00Z' WHERE name = 'yearly'`);
    expect(row((await sluice('cron', 'list')).stdout, 'yearly')[4]).toBe('2026-01-01T00:00:00.000Z');
    const [ticked] = JSON.parse((await sluice('cron', 'list', '--json')).stdout) as { lastTick: string | null }[];
    expect(ticked!.lastTick).toBe('2026-01-01T00:00:00.000Z');
  });
});

describe('jobs', () => {
  /** A job that failed its first attempt (the worker's error entry, Postgres's time format) and then `status`. */
  async function failedOnceThen(status: 'completed' | 'pending', task: string): Promise<string> {
    const id = await fx.queue.enqueue(task, {}, { queue: 'first-use' });
    await fx.db.pool.query(
      `UPDATE ${fx.db.s}.jobs SET status = $2, attempts = 2, finished_at = CASE WHEN $2 = 'completed' THEN now() END,
        last_error = 'Error: smtp busy\n    at send (mail.js:1)',
        errors = jsonb_build_array(jsonb_build_object('attempt', 1, 'at', '2026-01-01T09:30:00.123456+00:00'::timestamptz,
          'message', 'Error: smtp busy'))
      WHERE id = $1`,
      [id, status],
    );
    return id;
  }

  it("a completed job's list line shows no error; jobs show keeps the earlier attempt's", async () => {
    const done = await failedOnceThen('completed', 'done');
    const retrying = await failedOnceThen('pending', 'retrying');

    const list = await sluice('jobs', 'list', '--queue', 'first-use');
    expect(list.code, list.stderr).toBe(0);
    expect(list.stdout.split('\n')[0]).toMatch(/^ID\s+STATUS\s+QUEUE\s+TASK\s+ATTEMPTS\s+CREATED\s+LAST ERROR$/);
    const doneRow = row(list.stdout, done);
    expect(doneRow.slice(1, 4)).toEqual(['completed', 'first-use', 'done']);
    expect(doneRow).toHaveLength(6); // no LAST ERROR cell
    expect(doneRow.join(' ')).not.toMatch(/smtp/);
    // A job waiting for its retry still says why.
    expect(row(list.stdout, retrying).at(-1)).toBe('Error: smtp busy');

    const show = await sluice('jobs', 'show', done);
    expect(show.stdout).toMatch(/^status: +completed$/m);
    expect(show.stdout).toMatch(/^error #1 +2026-01-01T09:30:00\.123Z {2}Error: smtp busy$/m);
  });

  it('every time is ISO 8601 UTC, in tables, details and --json', async () => {
    const id = await failedOnceThen('completed', 'timed');

    const list = await sluice('jobs', 'list', '--queue', 'first-use');
    expect(row(list.stdout, id)[5]).toMatch(ISO_UTC);

    const show = await sluice('jobs', 'show', id);
    for (const field of ['run at', 'created at', 'updated at', 'finished at']) {
      const value = new RegExp(`^${field}: +(.*)$`, 'm').exec(show.stdout)?.[1];
      expect(value, field).toMatch(ISO_UTC);
    }

    const json = JSON.parse((await sluice('jobs', 'show', id, '--json')).stdout) as {
      created_at: string;
      finished_at: string;
      errors: { at: string }[];
    };
    expect(json.created_at).toMatch(ISO_UTC);
    expect(json.finished_at).toMatch(ISO_UTC);
    expect(json.errors[0]!.at).toBe('2026-01-01T09:30:00.123Z');

    const page = JSON.parse((await sluice('jobs', 'list', '--json')).stdout) as { jobs: { created_at: string }[] };
    expect(page.jobs[0]!.created_at).toMatch(ISO_UTC);
    const stats = JSON.parse((await sluice('stats', '--json')).stdout) as { at: string };
    expect(stats.at).toMatch(ISO_UTC);
  });
});

describe('stats', () => {
  it('counts the finished jobs the pruner moved to jobs_history; a queue whose jobs all finished stays listed', async () => {
    const [a1, a2, a3, b1] = await fx.queue.enqueueMany([
      { task: 'x', queue: 'archived-all' },
      { task: 'x', queue: 'archived-all' },
      { task: 'x', queue: 'archived-all' },
      { task: 'x', queue: 'mixed' },
    ]);
    await fx.queue.enqueue('x', {}, { queue: 'mixed' });
    await fx.db.pool.query(
      `UPDATE ${fx.db.s}.jobs SET status = CASE WHEN id = $1 THEN 'cancelled' ELSE 'completed' END,
        finished_at = now() - interval '10 minutes' WHERE id = ANY($2::bigint[])`,
      [a3, [a1, a2, a3, b1]],
    );
    // The real pruner, archiving everything finished (the default keeps jobs a minute first).
    const pruned = await prune(fx.db.pool, buildMaintenanceQueries(fx.db.schema), resolvePrunerConfig({ delayMs: 0 }));
    expect(pruned.archived).toBe(4);
    const { rows } = await fx.db.pool.query(`SELECT count(*)::int AS n FROM ${fx.db.s}.jobs`);
    expect(rows[0].n).toBe(1);

    const json = JSON.parse((await sluice('stats', '--json')).stdout) as { queues: Record<string, unknown>[] };
    expect(json.queues).toEqual([
      expect.objectContaining({ queue: 'archived-all', pending: 0, completed: 2, cancelled: 1, failed: 0, completedInWindow: 0 }),
      expect.objectContaining({ queue: 'mixed', pending: 1, completed: 1, cancelled: 0, failed: 0 }),
    ]);
    const table = await sluice('stats');
    expect(row(table.stdout, 'archived-all').slice(0, 7)).toEqual(['archived-all', '0', '0', '0', '2', '0', '1']);
  });
});
