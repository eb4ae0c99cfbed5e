/**
 * The `sluice` executable as users run it: real processes (node bin/sluice.js,
 * built by `npm test`), real Postgres, this file's own schema.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { quoteSchema } from '../src/db/identifiers.js';
import { Queue } from '../src/index.js';
import { createTestSchema, statusCounts, waitFor, type TestDatabase } from './helpers/database.js';
import { BIN, runSluice, spawnCli, type CliResult } from './helpers/cli.js';
import { startGate } from './helpers/tcp-gate.js';

let db: TestDatabase;
let env: Record<string, string>;
// Jobs the tests only need to exist are added through the library: one process
// spawn per CLI call adds up.
let queue: Queue;

beforeAll(async () => {
  db = await createTestSchema('cli');
  env = { DATABASE_URL: db.url, SLUICE_SCHEMA: db.schema };
  queue = new Queue({ pool: db.pool, schema: db.schema });
});
afterAll(async () => {
  await db.drop();
});
beforeEach(async () => {
  await db.pool.query(`TRUNCATE ${db.s}.jobs`);
});

const sluice = (...args: string[]) => runSluice(args, env);

/** A failure is one line on stderr, with no stack trace. */
function expectOneLineError(result: CliResult, code: number, pattern: RegExp): void {
  expect(result.code, result.stderr).toBe(code);
  expect(result.stderr).toMatch(pattern);
  const lines = result.stderr
    .trim()
    .split('\n')
    .filter((l) => l !== '(add --help for usage)');
  expect(lines).toHaveLength(1);
  expect(result.stderr).not.toMatch(/^\s+at /m);
}

async function job(id: string) {
  const { rows } = await db.pool.query(`SELECT *, id::text AS id FROM ${db.s}.jobs WHERE id = $1`, [id]);
  return rows[0];
}

describe('help', () => {
  it('every command answers --help with its usage and exit code 0', async () => {
    const commands = [
      [],
      ['migrate'],
      ['worker'],
      ['enqueue'],
      ['jobs'],
      ['jobs', 'list'],
      ['jobs', 'show'],
      ['jobs', 'retry'],
      ['jobs', 'cancel'],
      ['jobs', 'run-now'],
      ['jobs', 'delete'],
      ['stats'],
      ['demo'],
    ];
    const results = await Promise.all(commands.map((c) => runSluice([...c, '--help'])));
    results.forEach((r, i) => {
      expect(r.code, commands[i]!.join(' ')).toBe(0);
      expect(r.stdout).toContain(`Usage: sluice ${commands[i]!.join(' ')}`.trim());
    });
    expect(results[3]!.stdout).toMatch(/--delay <duration>/);
  });
});

describe('migrate', () => {
  it('applies the migrations once, then reports the schema up to date', async () => {
    const schema = `${db.schema}_m`;
    try {
      const first = await runSluice(['--database-url', db.url, '--schema', schema, 'migrate']);
      expect(first.code, first.stderr).toBe(0);
      expect(first.stdout).toMatch(/^applied 0001_jobs$/m);
      const again = await runSluice(['--database-url', db.url, '--schema', schema, 'migrate', '--json']);
      expect(JSON.parse(again.stdout)).toMatchObject({ schema, applied: [] });
    } finally {
      await db.pool.query(`DROP SCHEMA IF EXISTS ${quoteSchema(schema)} CASCADE`);
    }
  });
});

describe('enqueue', () => {
  it('inserts the job and prints its id', async () => {
    const result = await sluice(
      'enqueue',
      'send_welcome',
      '{"userId":42}',
      '--queue',
      'mail',
      '--max-attempts',
      '3',
      '--priority',
      '7',
    );
    expect(result.code, result.stderr).toBe(0);
    const id = result.stdout.trim();
    expect(id).toMatch(/^\d+$/);
    expect(await job(id)).toMatchObject({
      task: 'send_welcome',
      queue: 'mail',
      payload: { userId: 42 },
      max_attempts: 3,
      priority: 7,
      status: 'pending',
    });
  });

  it('schedules with --delay (server clock) and --run-at', async () => {
    const delayed = await sluice('enqueue', 'later', '--delay', '5m', '--json');
    const { id } = JSON.parse(delayed.stdout);
    const { rows } = await db.pool.query(
      `SELECT run_at > now() + interval '4 minutes' AND run_at <= now() + interval '5 minutes' AS ok FROM ${db.s}.jobs WHERE id = $1`,
      [id],
    );
    expect(rows[0].ok).toBe(true);

    const at = await sluice('enqueue', 'later', '{}', '--run-at', '2031-05-06T07:08:09Z');
    expect((await job(at.stdout.trim())).run_at.toISOString()).toBe('2031-05-06T07:08:09.000Z');
  });

  it('puts the job in a group with --group; an empty key is refused and inserts nothing (outside review 169)', async () => {
    const grouped = await sluice('enqueue', 'sync', '{"accountId":42}', '--queue', 'sync', '--group', 'account-42');
    expect(grouped.code, grouped.stderr).toBe(0);
    expect(await job(grouped.stdout.trim())).toMatchObject({ queue: 'sync', group_key: 'account-42' });
    const before = await statusCounts(db);
    const empty = await sluice('enqueue', 'sync', '--queue', 'sync', '--group', '');
    expectOneLineError(empty, 2, /group/);
    expect(await statusCounts(db)).toEqual(before);
  });

  it('rejects a payload that is not JSON with the parse error, exit 2, and inserts nothing', async () => {
    const result = await sluice('enqueue', 'send_welcome', '{"userId": 42,}');
    expectOneLineError(result, 2, /payload is not valid JSON: .*JSON at position/);
    expect(result.stdout).toBe('');
    expect(await statusCounts(db)).toEqual({});
  });
});

describe('usage errors exit 2 with one line', () => {
  const cases: [string, string[], RegExp][] = [
    ['unknown command', ['frobnicate'], /unknown command 'frobnicate'/],
    ['missing task', ['enqueue'], /missing required argument 'task'/],
    ['run-at and delay', ['enqueue', 't', '--run-at', '2030-01-01T00:00:00Z', '--delay', '1m'], /--run-at or --delay, not both/],
    ['bad max attempts', ['enqueue', 't', '--max-attempts', '0'], /--max-attempts <n>.*integer from 1 to 1000/],
    [
      'duration without a unit',
      ['enqueue', 't', '--delay', '10'],
      /--delay.*needs a unit: 10ms for milliseconds, 10s for seconds/,
    ],
    // Outside review 97: told it needed a unit.
    ['negative duration', ['enqueue', 't', '--delay', '-5s'], /argument '-5s' is invalid\. must not be negative/],
    // Outside review 276: refused by enqueue, naming its delayMs and a count of milliseconds.
    [
      'a delay past the years',
      ['enqueue', 't', '--delay', '10000y'],
      /--delay <duration>.*whole number of milliseconds from 0ms to 36525d/,
    ],
    ['bad date', ['enqueue', 't', '--run-at', 'tomorrowish'], /must be an ISO 8601 date/],
    // JavaScript's Date took these (as 2001-12-01, and 2 March): outside review 69.
    ['a bare number as a date', ['enqueue', 't', '--run-at', '12'], /must be an ISO 8601 date/],
    ['a date that does not exist', ['enqueue', 't', '--run-at', '2030-02-30'], /not a date that exists/],
    ['a time without its zone', ['enqueue', 't', '--run-at', '2030-01-01 10:00'], /needs a time zone/],
    ['unknown status', ['jobs', 'list', '--status', 'done'], /unknown status "done"/],
    ['retry without id or --failed', ['jobs', 'retry'], /give a job id or --failed$/m],
    ['retry with an id and --failed', ['jobs', 'retry', '5', '--failed'], /give a job id or --failed, not both/],
    ['bulk delete without --older-than', ['jobs', 'delete', '--completed'], /needs --older-than/],
    ['delete id and bulk', ['jobs', 'delete', '5', '--completed', '--older-than', '1d'], /give a job id, or/],
    ['doctor --check-timeout without a unit', ['doctor', '--check-timeout', '5'], /--check-timeout <duration>.*needs a unit/],
    // Outside review 230: refused by deleteFinished, naming its olderThanMs.
    [
      'an age past the year 1',
      ['jobs', 'delete', '--completed', '--older-than', '99999999999999d'],
      /--older-than <duration>.*reaches back past the year 1/,
    ],
    ['worker without --tasks', ['worker'], /required option '--tasks <module>'/],
    ['worker with a missing module', ['worker', '--tasks', './no/such/tasks.js'], /task module not found/],
    ['worker with a directory as its module', ['worker', '--tasks', './tests'], /task module is a directory/],
    // Outside review 174: "Worker: tasks is empty", and --interval without --watch taken and ignored.
    [
      'worker with a module that exports nothing',
      ['worker', '--tasks', './tests/fixtures/cli-empty-tasks.cjs'],
      /must export `tasks`/,
    ],
    ['stats --interval without --watch', ['stats', '--interval', '1s'], /--interval goes with --watch/],
    ['not a job id', ['jobs', 'show', '12abc'], /not a job id/],
    // Outside review 182: answered with the API's names ("listJobs: give before or after", "deleteSchedule: name").
    [
      'both pages',
      ['jobs', 'list', '--before', '1', '--after', '2'],
      /option '--before <id>' cannot be used with option '--after <id>'/,
    ],
    ['an empty schedule name', ['cron', 'delete', ''], /<name> must not be empty/],
    // Outside review 126: answered with the library's "visibilityTimeoutMs must be an integer from 1000 to 86400000".
    [
      'a visibility timeout out of range',
      ['worker', '--tasks', './tests', '--visibility-timeout', '10ms'],
      /--visibility-timeout <duration>' argument '10ms' is invalid\. must be a whole number of milliseconds from 1s to 1d/,
    ],
    [
      'a poll interval out of range',
      ['worker', '--tasks', './tests', '--poll-interval', '5ms'],
      /--poll-interval <duration>' argument '5ms' is invalid/,
    ],
    [
      'a statement timeout out of range',
      ['worker', '--tasks', './tests', '--statement-timeout', '50ms'],
      /--statement-timeout <duration>' argument '50ms' is invalid\. must be a whole number of milliseconds from 100ms to 1d/,
    ],
    // Outside review 130: answered with the Worker's option names.
    [
      'a listen URL that is not one',
      ['worker', '--tasks', './tests', '--listen-url', 'notaurl'],
      /--listen-url <url>' argument 'notaurl' is invalid\. it is not a URL; it should look like postgres:\/\//,
    ],
    [
      'an empty metrics host',
      ['worker', '--tasks', './tests', '--metrics-port', '0', '--metrics-host', ''],
      /--metrics-host <host>' argument '' is invalid\. must be a host name or an IP address/,
    ],
    [
      'a shutdown timeout out of range',
      ['worker', '--tasks', './tests', '--shutdown-timeout', '2d'],
      /--shutdown-timeout <duration>' argument '2d' is invalid\. must be a whole number of milliseconds from 0ms to 1d/,
    ],
  ];
  it('for every kind of mistake', async () => {
    // In parallel: each case is a process start and nothing else.
    const results = await Promise.all(cases.map(([, args]) => sluice(...args)));
    results.forEach((result, i) => {
      const [name, , pattern] = cases[i]!;
      expect(result.code, name).toBe(2);
      expectOneLineError(result, 2, pattern);
    });
  });

  it('no database configured', async () => {
    expectOneLineError(await runSluice(['stats']), 2, /no database: pass --database-url or set DATABASE_URL/);
  });
});

describe('runtime failures exit 1 with one line', () => {
  it('an unreachable database is named by host, port and database, never by password', async () => {
    const url = 'postgres://sluice_user:s3cret-Passw0rd@127.0.0.1:1/orders_db';
    const commands = [['stats'], ['enqueue', 't', '{}'], ['jobs', 'list']];
    const results = await Promise.all(commands.map((args) => runSluice(['--database-url', url, ...args])));
    for (const result of results) {
      expectOneLineError(result, 1, /cannot reach Postgres at 127\.0\.0\.1:1\/orders_db/);
      expect(result.stderr).not.toContain('s3cret-Passw0rd');
    }
  });

  it('a schema that was never migrated says to run migrate', async () => {
    const result = await runSluice(['--database-url', db.url, '--schema', `${db.schema}_none`, 'jobs', 'list']);
    expectOneLineError(result, 1, /no Sluice tables in schema ".*_none" at .*: run `sluice migrate` first/);
  });
});

describe('jobs', () => {
  it('list filters and pages; show prints payload, attempts, error and timestamps', async () => {
    const ids = await queue.enqueueMany(
      [
        ['a', 'q1'],
        ['b', 'q1'],
        ['a', 'q2'],
        ['a', 'q1'],
      ].map(([task, q]) => ({ task: task!, queue: q, payload: { n: 1 } })),
    );
    await db.pool.query(
      `UPDATE ${db.s}.jobs SET status = 'failed', attempts = 5, last_error = 'Error: smtp down\n    at send (mail.js:1)',
      errors = '[{"attempt":1,"at":"2026-01-01T00:00:00Z","message":"Error: smtp busy"}]', finished_at = now(),
      started_at = '2026-01-01T00:00:05Z' WHERE id = $1`,
      [ids[0]],
    );

    const table = await sluice('jobs', 'list', '--queue', 'q1', '--task', 'a');
    expect(table.code, table.stderr).toBe(0);
    const lines = table.stdout.trim().split('\n');
    expect(lines[0]).toMatch(/^ID\s+STATUS\s+QUEUE\s+TASK\s+ATTEMPTS\s+CREATED\s+LAST ERROR$/);
    expect(lines.slice(1).map((l) => l.split(/\s+/)[0])).toEqual([ids[3], ids[0]]);
    expect(lines[2]).toMatch(/failed\s+q1\s+a\s+5\/5\s+.*Error: smtp down$/);

    const page1 = JSON.parse((await sluice('jobs', 'list', '--limit', '2', '--json')).stdout);
    expect(page1.jobs.map((j: { id: string }) => j.id)).toEqual([ids[3], ids[2]]);
    const page2 = JSON.parse((await sluice('jobs', 'list', '--limit', '2', '--before', page1.nextBefore, '--json')).stdout);
    expect(page2.jobs.map((j: { id: string }) => j.id)).toEqual([ids[1], ids[0]]);
    expect(page2.nextBefore).toBeNull();
    const failed = JSON.parse((await sluice('jobs', 'list', '--status', 'failed', '--json')).stdout);
    expect(failed.jobs.map((j: { id: string }) => j.id)).toEqual([ids[0]]);

    // Names shown as the list shows them: a line break or a bidi override broke the field (outside review 252).
    const odd = await queue.enqueue('rlo\u202etask', {}, { queue: 'tab\there\nnewline' });
    const oddShown = await sluice('jobs', 'show', odd);
    expect(oddShown.stdout).toMatch(/^task: +"rlo\\u202etask"$/m);
    expect(oddShown.stdout).toMatch(/^queue: +"tab\\there\\nnewline"$/m);

    const show = await sluice('jobs', 'show', ids[0]!);
    expect(show.code).toBe(0);
    expect(show.stdout).toMatch(/^status: +failed$/m);
    expect(show.stdout).toMatch(/^attempts: +5 of 5$/m);
    expect(show.stdout).toMatch(/^payload: +\{\n +"n": 1\n +\}$/m);
    expect(show.stdout).toMatch(/^last error: +Error: smtp down\n +at send/m);
    expect(show.stdout).toMatch(/^error #1 +2026-01-01T00:00:00.000Z  Error: smtp busy$/m);
    expect(show.stdout).toMatch(/^finished at: +\d{4}-\d\d-\d\dT/m);
    expect(show.stdout).toMatch(/^started at: +2026-01-01T00:00:05.000Z$/m);
    // Not processing: nobody holds it (outside review 85: "locked by" on a job waiting for its retry).
    expect(show.stdout).toMatch(/^last run by: +/m);
    expect(show.stdout).not.toMatch(/^locked by:/m);
    // A rescue clears locked_by; its history entry still names the worker (review 88: "last run by: -").
    await db.pool.query(
      `UPDATE ${db.s}.jobs SET attempts = 1, locked_by = NULL,
      errors = '[{"attempt":1,"at":"2026-01-01T00:00:00Z","message":"rescued","worker":"host:7:rescued"}]' WHERE id = $1`,
      [ids[2]],
    );
    expect((await sluice('jobs', 'show', ids[2]!)).stdout).toMatch(/^last run by: +host:7:rescued$/m);
    const shown = JSON.parse((await sluice('jobs', 'show', ids[1]!, '--json')).stdout);
    expect(shown).toMatchObject({ id: ids[1], task: 'b', payload: { n: 1 } });

    expectOneLineError(await sluice('jobs', 'show', '987654321'), 1, /job 987654321 not found/);

    // Into a shell pipe (64 KiB of buffer; the tests' own stdio is a socket pair): cut
    // off there, with code 0, when the CLI exited at once (outside review 195).
    const big = await queue.enqueue('big', { text: 'x'.repeat(300_000) });
    const child = spawn('sh', ['-c', '"$@" | cat; exit $?', 'sh', process.execPath, BIN, 'jobs', 'show', big, '--json'], {
      env: { ...process.env, ...env },
    });
    let piped = '';
    child.stdout.on('data', (d: Buffer) => (piped += d.toString()));
    const [code] = (await once(child, 'close')) as [number];
    expect(code).toBe(0);
    expect(JSON.parse(piped).payload.text).toHaveLength(300_000);
  });

  it('retry, cancel and delete one job, and refuse the wrong state', async () => {
    const id = await queue.enqueue('x');
    expectOneLineError(
      await sluice('jobs', 'retry', id),
      1,
      new RegExp(`job ${id} is pending; only failed or cancelled jobs can be retried`),
    );

    const cancel = await sluice('jobs', 'cancel', id);
    expect(cancel.stdout).toBe(`cancelled job ${id} (x on queue default; had not started)\n`);
    expect((await job(id)).status).toBe('cancelled');
    expectOneLineError(await sluice('jobs', 'cancel', id), 1, /is cancelled; only pending or processing jobs can be cancelled/);

    const retry = await sluice('jobs', 'retry', id, '--json');
    expect(JSON.parse(retry.stdout)).toMatchObject({ id, status: 'pending' });

    await db.pool.query(`UPDATE ${db.s}.jobs SET status = 'processing' WHERE id = $1`, [id]);
    expectOneLineError(
      await sluice('jobs', 'delete', id),
      1,
      /is processing; only pending, completed, failed or cancelled jobs can be deleted/,
    );
    await db.pool.query(`UPDATE ${db.s}.jobs SET status = 'completed', finished_at = now() WHERE id = $1`, [id]);
    expect((await sluice('jobs', 'delete', id)).code).toBe(0);
    expect(await job(id)).toBeUndefined();
    // Every action is in the audit log, by 'cli'.
    const { rows: audit } = await db.pool.query(
      `SELECT action, actor FROM ${db.s}.audit_log WHERE job_id = $1 ORDER BY at, action`,
      [id],
    );
    expect(audit.map((a) => `${a.action}:${String(a.actor).replace(/ \S+@\S+ pid \d+$/, '')}`).sort()).toEqual([
      'cancel:cli',
      'delete:cli',
      'retry:cli',
    ]);
  });

  it('run-now makes a delayed job due now, audited, and refuses one that is not pending', async () => {
    const id = await queue.enqueue('x', {}, { delayMs: 3_600_000 });
    const run = await sluice('jobs', 'run-now', id);
    expect(run.stdout).toBe(`job ${id} (x on queue default) is due now\n`);
    const { rows } = await db.pool.query(`SELECT run_at <= now() AS due FROM ${db.s}.jobs WHERE id = $1`, [id]);
    expect(rows).toEqual([{ due: true }]);
    const { rows: audit } = await db.pool.query(`SELECT action, actor FROM ${db.s}.audit_log WHERE job_id = $1`, [id]);
    expect(audit).toEqual([{ action: 'run_now', actor: expect.stringMatching(/^cli \S+@\S+ pid \d+$/) }]);
    expect(JSON.parse((await sluice('jobs', 'run-now', id, '--json')).stdout)).toMatchObject({ id, status: 'pending' });

    await db.pool.query(`UPDATE ${db.s}.jobs SET status = 'processing' WHERE id = $1`, [id]);
    expectOneLineError(await sluice('jobs', 'run-now', id), 1, /is processing; only pending jobs can be run now/);
    expectOneLineError(await sluice('jobs', 'run-now', '987654321'), 1, /job 987654321 not found/);
    // Named as read (review 93: "job  012 not found").
    expectOneLineError(await sluice('jobs', 'run-now', ' 0987654321'), 1, /: job 987654321 not found/);
    expectOneLineError(await sluice('jobs', 'run-now', ` 0${id}`), 1, new RegExp(`: job ${id} is processing`));
  });

  it('retry --failed [--queue] and delete --completed --older-than', async () => {
    await queue.enqueueMany(['a', 'a', 'b', 'b'].map((q) => ({ task: 'x', queue: q })));
    await db.pool.query(`UPDATE ${db.s}.jobs SET status = 'failed', finished_at = now()`);
    const one = await sluice('jobs', 'retry', '--failed', '--queue', 'a');
    expect(one.stdout).toBe('retried 2 failed jobs\n  a: 2\n');
    expect(JSON.parse((await sluice('jobs', 'retry', '--failed', '--json')).stdout)).toEqual({ retried: 2, queues: { b: 2 } });

    await db.pool.query(`UPDATE ${db.s}.jobs SET status = 'completed',
      finished_at = now() - CASE WHEN queue = 'a' THEN interval '8 days' ELSE interval '1 day' END`);
    const old = await sluice('jobs', 'delete', '--completed', '--older-than', '7d');
    expect(old.code, old.stderr).toBe(0);
    expect(old.stdout).toBe('deleted 2 completed jobs finished more than 7d ago\n');
    expect(await statusCounts(db)).toEqual({ completed: 2 });
  });
});

describe('a row locked by another session', () => {
  it('jobs cancel says why it waits after 5 s, then cancels once the lock goes', async () => {
    const id = await queue.enqueue('t', {}, { queue: 'locked' });
    const holder = await db.pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query(`SELECT 1 FROM ${db.s}.jobs WHERE id = $1 FOR UPDATE`, [id]);
      const cli = spawnCli(['jobs', 'cancel', id], env);
      await waitFor(() => cli.stderr().includes('still waiting for Postgres'), 'the notice', 20_000);
      expect(cli.stderr()).toMatch(/locked by another session .*sluice doctor/);
      expect((await job(id)).status).toBe('pending');
      await holder.query('COMMIT');
      const result = await cli.exited;
      expect(result.code, result.stderr).toBe(0);
      expect((await job(id)).status).toBe('cancelled');
    } finally {
      holder.release();
    }
  }, 30_000);
});

describe('stats', () => {
  it('prints counts per queue as a table and as JSON', async () => {
    await queue.enqueueMany([
      { task: 'x', queue: 'a' },
      { task: 'x', queue: 'a' },
      { task: 'x', queue: 'b' },
      { task: 'x', queue: 'b', delayMs: 3_600_000 },
    ]);
    await db.pool.query(
      `UPDATE ${db.s}.jobs SET status = 'completed', finished_at = now() WHERE id = (SELECT min(id) FROM ${db.s}.jobs)`,
    );

    const table = await sluice('stats');
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout).toMatch(
      /^QUEUE\s+PENDING\s+SCHEDULED\s+RUNNING\s+COMPLETED\s+FAILED\s+CANCELLED\s+OLDEST PENDING\s+JOBS\/S \(1m\)\s+FAILED \(1m\)$/m,
    );
    expect(table.stdout).toMatch(/^a\s+1\s+0\s+0\s+1\s+0\s+0\s+\S+\s+0\.02\s+0$/m);
    expect(table.stdout).toMatch(/^b\s+2\s+1\s+0\s+0\s+0\s+0\s+\S+\s+0\.00\s+0$/m);

    const json = JSON.parse((await sluice('stats', '--json')).stdout);
    expect(json.windowMs).toBe(60_000);
    expect(json.queues).toMatchObject([
      { queue: 'a', pending: 1, completed: 1, completedInWindow: 1 },
      { queue: 'b', pending: 2, scheduled: 1 },
    ]);
    expect(json.queues.map((q: { paused: boolean }) => q.paused)).toEqual([false, false]);

    // A paused queue's backlog waits on purpose: stats says so (outside review 178).
    expect((await sluice('queues', 'pause', 'b')).code).toBe(0);
    expect((await sluice('stats')).stdout).toMatch(/^b \(paused\)\s+2\s+1\s/m);
    expect(JSON.parse((await sluice('stats', '--json')).stdout).queues[1]).toMatchObject({ queue: 'b', paused: true });
  });

  it('--watch rides out Postgres going away: says so once, goes on refreshing once it is back (outside review 201)', async () => {
    const gate = await startGate(new URL(db.url));
    const cli = spawnCli(['stats', '--watch', '--json', '--interval', '100ms'], { ...env, DATABASE_URL: gate.url });
    try {
      const lines = () => cli.stdout().split('\n').filter(Boolean).length;
      await waitFor(() => lines() >= 1, 'a first refresh');
      gate.down();
      await waitFor(() => cli.stderr().includes('trying again every refresh'), 'the outage said');
      const before = lines();
      gate.up();
      await waitFor(() => cli.stderr().includes('"reached-postgres"'), 'the recovery said');
      await waitFor(() => lines() > before, 'refreshes again');
      // Said once each, as JSON lines under --json (outside review 206: plain text).
      const said = cli
        .stderr()
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { event: string; error?: string });
      expect(said.map((l) => l.event)).toEqual(['waiting-for-postgres', 'reached-postgres']);
      expect(said[0]!.error).toMatch(/cannot reach Postgres.*trying again every refresh/);
      cli.child.kill('SIGTERM');
      expect((await cli.exited).code).toBe(0);
    } finally {
      cli.child.kill('SIGKILL');
      await gate.close();
    }
  });

  it('--watch started while Postgres cannot be reached waits for it, as sluice worker does (outside review 209)', async () => {
    const gate = await startGate(new URL(db.url));
    gate.down();
    const cli = spawnCli(['stats', '--watch', '--json', '--interval', '100ms'], { ...env, DATABASE_URL: gate.url });
    try {
      await waitFor(() => cli.stderr().includes('"waiting-for-postgres"'), 'the wait said');
      expect(cli.stdout()).toBe('');
      gate.up();
      await waitFor(() => cli.stdout().includes('"queues"'), 'a first refresh');
      cli.child.kill('SIGTERM');
      const result = await cli.exited;
      expect(result.code, result.stderr).toBe(0);
      const said = result.stderr
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { event: string; error?: string });
      expect(said.map((l) => l.event)).toEqual(['waiting-for-postgres', 'reached-postgres']);
      expect(said[0]!.error).toMatch(/cannot reach Postgres/);
    } finally {
      cli.child.kill('SIGKILL');
      await gate.close();
    }
  });

  it('--watch stopped while it waits for Postgres exits 0, on SIGINT as on SIGTERM (outside review 279: 130, 143)', async () => {
    const gate = await startGate(new URL(db.url));
    gate.down();
    try {
      for (const signal of ['SIGINT', 'SIGTERM'] as const) {
        const cli = spawnCli(['stats', '--watch', '--json', '--interval', '100ms'], { ...env, DATABASE_URL: gate.url });
        try {
          await waitFor(() => cli.stderr().includes('"waiting-for-postgres"'), 'the wait said');
          cli.child.kill(signal);
          const result = await cli.exited;
          expect({ signal, code: result.code, stdout: result.stdout }).toEqual({ signal, code: 0, stdout: '' });
        } finally {
          cli.child.kill('SIGKILL');
        }
      }
    } finally {
      await gate.close();
    }
  });

  it('--watch into a pipe that closes (| head -1) exits 0 quietly, not with an unhandled EPIPE', async () => {
    const cli = spawnCli(['stats', '--watch', '--interval', '100ms'], env);
    await new Promise((resolve) => cli.child.stdout!.once('data', resolve));
    cli.child.stdout!.destroy(); // the reader went away
    const { code, stderr } = await cli.exited;
    expect(stderr).toBe('');
    expect(code).toBe(0);
  });
});
