/**
 * An outside review of the CLI: one time format for the attempt history's
 * every time, archived jobs are read-only (not "not found"), the worker prints
 * the maintenance leader's warnings, the demo keeps to its own schema, and
 * invalid intervals and queue names are refused. Real processes
 * (node bin/sluice.js), real Postgres, this file's own schema.
 */
import { describe, expect, it } from 'vitest';
import { buildMaintenanceQueries, prune, resolvePrunerConfig, runJobNow } from '../src/index.js';
import { waitFor } from './helpers/database.js';
import { cliSchema, FIXTURES, ISO_UTC, runSluice, spawnCli, type CliResult } from './helpers/cli.js';

const fx = cliSchema('cli_review');
const sluice = fx.sluice;

function expectOneLineError(result: CliResult, code: number, pattern: RegExp): void {
  expect(result.code, result.stderr).toBe(code);
  expect(result.stderr).toMatch(pattern);
  const lines = result.stderr
    .trim()
    .split('\n')
    .filter((l) => l !== '(add --help for usage)');
  expect(lines).toHaveLength(1);
}

/** A failed job whose error history Postgres wrote, as the worker's statements do (jsonb times in its own format). */
async function failedJob(): Promise<string> {
  const id = await fx.queue.enqueue('x', { n: 1 }, { maxAttempts: 1 });
  await fx.db.pool.query(
    `UPDATE ${fx.db.s}.jobs SET status = 'failed', attempts = 1, finished_at = now() - interval '10 minutes',
       last_error = 'Error: boom',
       errors = jsonb_build_array(jsonb_build_object('attempt', 1, 'at', now() - interval '10 minutes',
         'message', 'Error: boom', 'started_at', now() - interval '11 minutes', 'worker', 'w1'))
     WHERE id = $1`,
    [id],
  );
  return id;
}

describe('times in --json', () => {
  it('jobs show and dead-letters show write every time of the error history as ISO UTC with ms', async () => {
    const id = await failedJob();
    const { rows } = await fx.db.pool.query(`SELECT errors->0->>'started_at' AS s FROM ${fx.db.s}.jobs WHERE id = $1`, [id]);
    expect(rows[0].s).not.toMatch(ISO_UTC); // Postgres's own format: the thing to rewrite
    for (const command of [
      ['jobs', 'show'],
      ['dead-letters', 'show'],
    ]) {
      const result = await sluice(...command, id, '--json');
      expect(result.code, result.stderr).toBe(0);
      const job = JSON.parse(result.stdout);
      expect(job.errors).toHaveLength(1);
      expect(job.errors[0].at).toMatch(ISO_UTC);
      expect(job.errors[0].started_at).toMatch(ISO_UTC);
      expect(job.errors[0].worker).toBe('w1');
      expect(job.errors[0].attempt).toBe(1);
      for (const field of ['created_at', 'updated_at', 'finished_at', 'run_at']) expect(job[field]).toMatch(ISO_UTC);
    }
  });
});

describe('text written by jobs', () => {
  it('jobs show and dead-letters show escape control codes and bidi overrides of payloads and errors (outside review 265)', async () => {
    const id = await failedJob();
    const hostile = 'before\x1b[2J\x1b]0;PWNED\x07\rafter\u202e';
    await fx.db.pool.query(
      `UPDATE ${fx.db.s}.jobs SET payload = jsonb_build_object('msg', $2::text), last_error = $2,
         errors = jsonb_set(errors, '{0,message}', to_jsonb($2::text)) WHERE id = $1`,
      [id, hostile],
    );
    for (const command of [
      ['jobs', 'show'],
      ['dead-letters', 'show'],
    ]) {
      const result = await sluice(...command, id);
      expect(result.code, result.stderr).toBe(0);
      expect(result.stdout).toContain('before\\u001b[2J\\u001b]0;PWNED\\u0007\\u000dafter\\u202e');
      expect(result.stdout).not.toMatch(/[\x00-\x08\x0b-\x1f\u202e]/);
    }
  });
});

describe('bulk cancel', () => {
  it('jobs cancel --queue [--task] [--status] cancels every unfinished job there; an id or filters, not both', async () => {
    await fx.queue.enqueueMany([
      { task: 'a', queue: 'bulk-cancel' },
      { task: 'a', queue: 'bulk-cancel' },
      { task: 'b', queue: 'bulk-cancel' },
      { task: 'a', queue: 'bulk-keep' },
    ]);
    const byTask = await sluice('jobs', 'cancel', '--queue', 'bulk-cancel', '--task', 'a', '--status', 'pending');
    expect(byTask.code, byTask.stderr).toBe(0);
    expect(byTask.stdout).toBe('cancelled 2 jobs (2 pending; 0 running or claimed: their workers abort the handlers)\n');
    const rest = await sluice('jobs', 'cancel', '--queue', 'bulk-cancel', '--json');
    expect(JSON.parse(rest.stdout)).toEqual({ cancelled: 1, pending: 1, processing: 0 });
    const { rows } = await fx.db.pool.query(`SELECT queue, status FROM ${fx.db.s}.jobs WHERE queue LIKE 'bulk-%' ORDER BY id`);
    expect(rows.map((r) => `${r.queue}:${r.status}`)).toEqual([
      'bulk-cancel:cancelled',
      'bulk-cancel:cancelled',
      'bulk-cancel:cancelled',
      'bulk-keep:pending',
    ]);
    for (const [args, message] of [
      [[], /give a job id, or --queue and\/or --task/],
      [['7', '--queue', 'bulk-cancel'], /not both/],
      [['--queue', 'bulk-cancel', '--status', 'failed'], /--status must be pending or processing/],
      [['7', '--status', 'pending'], /--status goes with --queue or --task/],
    ] as const) {
      const refused = await sluice('jobs', 'cancel', ...args);
      expect(refused.code).toBe(2);
      expect(refused.stderr).toMatch(message);
    }
  });
});

describe('archived jobs', () => {
  it('a queue whose jobs are all archived is known to `queues pause` (outside review 85: "has no jobs")', async () => {
    const [id] = await fx.queue.enqueueMany([{ task: 'x', queue: 'only-archived' }]);
    await fx.db.pool.query(
      `UPDATE ${fx.db.s}.jobs SET status = 'completed', finished_at = now() - interval '10 minutes' WHERE id = $1`,
      [id],
    );
    await prune(fx.db.pool, buildMaintenanceQueries(fx.db.schema), resolvePrunerConfig({ delayMs: 0 }));
    const { rows } = await fx.db.pool.query(`SELECT count(*)::int AS n FROM ${fx.db.s}.jobs WHERE queue = 'only-archived'`);
    expect(rows[0].n).toBe(0);
    const pause = await sluice('queues', 'pause', 'only-archived');
    expect(pause.code, pause.stderr).toBe(0);
    expect(pause.stdout).toBe('only-archived: paused, no limit, not grouped, no group limit, rate -, group rate -\n');
  });

  it('retry, cancel, delete and run-now say archived and read-only (exit 1); show says archived; bulk delete says what it skips', async () => {
    // The pruner archives completed and cancelled jobs (failed ones stay until their retention ends).
    const [done, cancelled] = await fx.queue.enqueueMany([{ task: 'x' }, { task: 'x' }]);
    await fx.db.pool.query(
      `UPDATE ${fx.db.s}.jobs SET status = CASE WHEN id = $1 THEN 'cancelled' ELSE 'completed' END,
         finished_at = now() - interval '10 minutes' WHERE id = ANY($2::bigint[])`,
      [cancelled, [done, cancelled]],
    );
    const pruned = await prune(fx.db.pool, buildMaintenanceQueries(fx.db.schema), resolvePrunerConfig({ delayMs: 0 }));
    expect(pruned.archived).toBe(2);

    const show = await sluice('jobs', 'show', done!);
    expect(show.code, show.stderr).toBe(0);
    expect(show.stdout).toMatch(/^status: +completed \(archived\b.*read-only\)$/m);

    // A cancelled job in the jobs table could be retried; archived, it cannot.
    for (const [verb, id] of [
      ['retry', cancelled],
      ['cancel', cancelled],
      ['delete', cancelled],
      ['delete', done],
      // It said "not found" (outside review 238).
      ['run-now', done],
    ] as const) {
      expectOneLineError(await sluice('jobs', verb, id!), 1, new RegExp(`job ${id} is archived .*read-only`));
    }
    expect(await runJobNow(fx.db.pool, fx.db.schema, done!)).toEqual({
      ok: false,
      reason: 'wrong_status',
      status: 'completed',
      archived: true,
    });
    // A job in the jobs table still shows no such note; one that never existed is still "not found".
    const live = await fx.queue.enqueue('x', {});
    expect((await sluice('jobs', 'show', live)).stdout).not.toMatch(/archived/);
    expectOneLineError(await sluice('jobs', 'retry', '999999999'), 1, /job 999999999 not found/);

    const bulk = await sluice('jobs', 'delete', '--completed', '--older-than', '1m');
    expect(bulk.code, bulk.stderr).toBe(0);
    expect(bulk.stdout).toMatch(/^deleted 0 completed jobs finished more than 1m ago \(archived jobs, .*are not touched\)$/m);
    const stats = JSON.parse((await sluice('stats', '--json')).stdout);
    expect(stats.queues[0].completed).toBe(1);
  });
});

describe('worker', () => {
  it("prints the maintenance leader's warning about due jobs no live worker handles", async () => {
    await fx.queue.enqueue('typo', {}, { queue: 'review' });
    const cli = spawnCli(['worker', '--tasks', `${FIXTURES}cli-tasks.mjs`, '--queue', 'review'], fx.env);
    try {
      await waitFor(() => /no live worker of that queue handles the task/.test(cli.stderr()), 'the warning', 30_000);
      const line = cli
        .stderr()
        .split('\n')
        .find((l) => l.includes('no live worker'))!;
      expect(line).toMatch(/^\d{4}-\d\d-\d\dT[\d:.]+Z warn sluice: 1 due jobs of task "typo" on queue "review" wait: /);
    } finally {
      cli.child.kill('SIGTERM');
      await cli.exited;
    }
  });

  it('with --json the warning is a JSON line with its fields', async () => {
    await fx.queue.enqueue('typo', {}, { queue: 'review-json' });
    const cli = spawnCli(['worker', '--tasks', `${FIXTURES}cli-tasks.mjs`, '--queue', 'review-json', '--json'], fx.env);
    try {
      await waitFor(() => /no live worker/.test(cli.stderr()), 'the warning', 30_000);
      const line = cli
        .stderr()
        .split('\n')
        .find((l) => l.includes('no live worker'))!;
      expect(JSON.parse(line)).toMatchObject({ event: 'warn', queue: 'review-json', task: 'typo', jobs: 1 });
    } finally {
      cli.child.kill('SIGTERM');
      await cli.exited;
    }
  });
});

describe('demo', () => {
  it('stops at the first Ctrl-C on a DATABASE_URL, with exit 130 (outside review 174: it went on)', async () => {
    const demo = spawnCli(['demo', '--jobs', '40000', '--workers', '1', '--concurrency', '1'], { DATABASE_URL: fx.db.url });
    try {
      await waitFor(() => demo.stdout().includes('started 1 workers'), 'the demo to run its workers', 60_000);
      // A second demo meanwhile is refused in one line: it dropped the first one's schema,
      // which then failed with a stack trace (outside review 241).
      expectOneLineError(
        await runSluice(['demo', '--jobs', '10'], { DATABASE_URL: fx.db.url }),
        1,
        /^sluice: another sluice demo is running on this database/,
      );
      expect(demo.stdout()).not.toMatch(/unexpected error/);
      demo.child.kill('SIGINT');
      const result = await Promise.race([
        demo.exited,
        new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), 20_000)),
      ]);
      expect(result?.code).toBe(130);
    } finally {
      demo.child.kill('SIGKILL');
      await demo.exited;
      await fx.db.pool.query('DROP SCHEMA IF EXISTS sluice_demo CASCADE');
    }
  });
});

describe('usage errors', () => {
  it('demo refuses a schema other than sluice_demo, from --schema or SLUICE_SCHEMA (exit 2)', async () => {
    expectOneLineError(
      await runSluice(['--schema', 'mine', 'demo'], { DATABASE_URL: fx.db.url }),
      2,
      /only ever uses "sluice_demo", not "mine"/,
    );
    expectOneLineError(
      await runSluice(['demo'], { DATABASE_URL: fx.db.url, SLUICE_SCHEMA: 'mine' }),
      2,
      /only ever uses "sluice_demo"/,
    );
  });

  it('stats --watch refuses an interval below 100ms, or above a day', async () => {
    for (const interval of ['0s', '0ms', '50ms']) {
      expectOneLineError(await sluice('stats', '--watch', '--interval', interval), 2, /--interval must be at least 100ms/);
    }
    // Outside review 182: 30d overflowed Node's timer, which then fired at once, in a loop.
    expectOneLineError(await sluice('stats', '--watch', '--interval', '30d'), 2, /--interval must be at most 1d/);
  });

  it('queues pause/resume/limit refuse an empty queue name as enqueue does', async () => {
    expectOneLineError(await sluice('queues', 'pause', ''), 2, /queue must be a string of 1 to \d+ characters, got ""/);
    expectOneLineError(await sluice('queues', 'resume', '', '--create'), 2, /queue must be a string of 1 to/);
    expectOneLineError(await sluice('queues', 'limit', '', '3'), 2, /queue must be a string of 1 to/);
  });
});
