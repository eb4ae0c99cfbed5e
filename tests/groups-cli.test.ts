import { hostname, userInfo } from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import stringWidth from 'string-width';
import { Queue } from '../src/index.js';
import { listGroupSettings, listQueueLimits } from '../src/groups/settings.js';
import { createTestSchema, type TestDatabase } from './helpers/database.js';
import { runCli } from './helpers/cli.js';

let db: TestDatabase;
let queue: Queue;

beforeAll(async () => {
  db = await createTestSchema('groupcli');
  queue = new Queue({ pool: db.pool, schema: db.schema });
});
afterAll(async () => {
  await queue.close();
  await db.drop();
});

const cli = (...args: string[]) => runCli(db.url, db.schema, ['queues', ...args]);

describe('sluice queues: unknown queues, groups and rate limits', () => {
  it('refuses to pause a queue with no jobs and no settings (a typo), with a hint; --create or a job makes it known', async () => {
    const typo = await cli('pause', 'emials');
    expect(typo.code).toBe(2);
    expect(typo.stderr).toContain('queue "emials" has no jobs and no settings');
    expect(typo.stderr).toContain('--create');
    expect((await listQueueLimits(db.pool, db.schema)).map((q) => q.name)).not.toContain('emials');

    expect(await cli('pause', 'later', '--create')).toMatchObject({
      code: 0,
      stdout: 'later: paused, no limit, not grouped, no group limit, rate -, group rate -\n',
    });
    await queue.enqueue('t', {}, { queue: 'emails' });
    expect(await cli('pause', 'emails')).toMatchObject({
      code: 0,
      stdout: 'emails: paused, no limit, not grouped, no group limit, rate -, group rate -\n',
    });
    // Known by its settings now, even without jobs.
    expect((await cli('resume', 'later')).code).toBe(0);
    // Recorded as the CLI's, like the rate and group commands (they were 'api').
    const { rows: audit } = await db.pool.query(
      `SELECT action, actor FROM ${db.s}.audit_log WHERE queue = 'later' ORDER BY at, id`,
    );
    // Who ran it, where: each command a process of its own (outside review 230: "cli" alone).
    const me = `cli ${userInfo().username}@${hostname()} pid `;
    expect(audit.map((a) => String(a.actor).replace(/\d+$/, ''))).toEqual([me, me]);
  });

  it('sets rate limits, group defaults and one group, and shows group stats', async () => {
    await queue.enqueueMany(['a', 'a', 'b'].map((group) => ({ task: 't', queue: 'api', group })));
    expect(await cli('rate', 'api', '100', '--per', '1s', '--burst', '5')).toMatchObject({
      code: 0,
      // Grouped jobs, but no worker has claimed one yet (migration 0021): not flagged.
      stdout: 'api: running, no limit, not grouped, no group limit, rate 100/1s burst 5, group rate -\n',
    });
    expect((await cli('groups', 'api', '--limit', '2', '--rate', '10', '--per', '1m')).stdout).toBe(
      'api: running, no limit, grouped, group limit 2, rate 100/1s burst 5, group rate 10/1m burst 1\n',
    );
    // Each setting command prints all of them (outside review 246: `limit` and `pause` left the rates out).
    expect((await cli('limit', 'api', '3')).stdout).toBe(
      'api: running, limit 3, grouped, group limit 2, rate 100/1s burst 5, group rate 10/1m burst 1\n',
    );
    expect((await cli('limit', 'api', 'none')).code).toBe(0);
    // The queue's group rate (10 per minute) still holds a group without a rate of its own (outside review 86: "rate -").
    expect((await cli('group', 'api', 'a', '--weight', '3', '--limit', '5')).stdout).toBe(
      'api / a: weight 3, limit 5, rate queue default\n',
    );
    expect((await cli('group', 'api', '-', '--limit', 'none')).stdout).toBe(
      'api / (no group): weight 1, limit queue default, rate queue default\n',
    );
    // A group named "-" is reached with --literal (it could not be addressed at all).
    expect((await cli('group', 'api', '-', '--literal', '--limit', '4')).stdout).toBe(
      'api / -: weight 1, limit 4, rate queue default\n',
    );
    expect(await listGroupSettings(db.pool, db.schema, 'api')).toMatchObject([
      { group: null, weight: 1, concurrencyLimit: null },
      { group: '-', weight: 1, concurrencyLimit: 4 },
      { group: 'a', weight: 3, concurrencyLimit: 5 },
    ]);
    expect((await cli('group', 'api', 'b', '--rate', '7', '--per', '2s')).stdout).toBe(
      'api / b: weight 1, limit queue default, rate 7/2s burst 1\n',
    );
    expect((await cli('group', 'api', 'b', '--rate', 'none')).stdout).toBe(
      'api / b: weight 1, limit queue default, rate queue default\n',
    );
    const stats = await cli('group-stats', 'api', '--json');
    expect(JSON.parse(stats.stdout)).toMatchObject({
      queue: 'api',
      groups: 2,
      due: 3,
      running: 0,
      top: [
        { group: 'a', due: 2, weight: 3, concurrencyLimit: 5, throttled: false },
        { group: 'b', due: 1, weight: 1, concurrencyLimit: 2, throttled: false },
      ],
    });
    // "none" puts a weight back to 1, as null does in the API (outside review 169: refused).
    expect((await cli('group', 'api', 'a', '--weight', 'none')).stdout).toBe('api / a: weight 1, limit 5, rate queue default\n');
    // Nothing to set, or --per/--burst with no rate to qualify: refused, nothing changed.
    const before = await listQueueLimits(db.pool, db.schema);
    for (const args of [
      ['groups', 'api'],
      ['groups', 'api', '--per', '5s'],
      ['groups', 'api', '--limit', '3', '--burst', '4'],
      ['group', 'api', 'a'],
      ['group', 'api', 'a', '--per', '5s'],
      ['rate', 'api', 'none', '--burst', '5'],
    ]) {
      const result = await cli(...args);
      expect(result.code, args.join(' ')).toBe(2);
      expect(result.stderr, args.join(' ')).toMatch(/give --|--per and --burst/);
    }
    expect(await listQueueLimits(db.pool, db.schema)).toEqual(before);
    expect((await cli('rate', 'api', 'fast')).code).toBe(2);
    // Out of range: the message names what was typed, not the API's field (outside review 86).
    for (const [args, message] of [
      [['groups', 'api', '--limit', '0'], '--limit must be an integer from 1 to 10000, or "none"'],
      [['group', 'api', 'a', '--limit', '10001'], '--limit must be an integer from 1 to 10000, or "none"'],
      [['rate', 'api', '0'], 'the rate must be an integer from 1 to 1000000, or "none"'],
      [['limit', 'api', '0'], 'the limit must be an integer from 1 to 10000, or "none"'],
      [['groups', 'api', '--rate', '10', '--per', '0s'], 'must be a whole number of milliseconds from 1ms to 1d'],
      [['rate', 'api', '10', '--per', '2d'], 'must be a whole number of milliseconds from 1ms to 1d'],
    ] as const) {
      const result = await cli(...args);
      expect(result.code, args.join(' ')).toBe(2);
      expect(result.stderr, args.join(' ')).toContain(message);
      expect(result.stderr, args.join(' ')).not.toMatch(/groupConcurrency|intervalMs|concurrency limit|rate limit:/);
    }
    expect((await cli('group', 'api', 'a', '--weight', '0')).code).toBe(2);
    expect((await cli('rate', 'nosuchqueue', '5')).code).toBe(2);
    const typo = await cli('group-stats', 'nosuchqueue');
    expect(typo.code).toBe(2);
    expect(typo.stderr).toMatch(/queue "nosuchqueue" has no jobs and no settings/);
  });

  it('group-stats quotes a group key that would break its table or hide in it: a line break, a tab, white space at an end, invisible characters', async () => {
    // Invisible ones too: a zero-width space, a right-to-left mark, a no-break space (outside review 181).
    const keys = ['line\nbreak', 'tab\there', '   ', ' lead', 'plain key', '\u200b', 'a\u200fb', 'x\u00a0y'];
    await queue.enqueueMany(keys.map((group) => ({ task: 't', queue: 'odd-keys', group })));
    const result = await cli('group-stats', 'odd-keys');
    expect(result.code, result.stderr).toBe(0);
    const lines = result.stdout.trimEnd().split('\n');
    // A header line, the table's header and one line per group: no key split a row.
    expect(lines).toHaveLength(2 + keys.length);
    for (const key of [
      '"line\\nbreak"',
      '"tab\\there"',
      '"   "',
      '" lead"',
      'plain key',
      '"\\u200b"',
      '"a\\u200fb"',
      '"x\\u00a0y"',
    ]) {
      expect(
        lines.some((line) => line.startsWith(`${key}  `)),
        key,
      ).toBe(true);
    }
  });

  it('group-stats pads its columns by what a terminal shows: an emoji or CJK key takes two columns a character, a combining mark none', async () => {
    const keys = ['\u{1F680}', '\u65E5\u672C\u8A9E', 'plain', 'e\u0301te\u0301'];
    await queue.enqueueMany(keys.map((group) => ({ task: 't', queue: 'wide-keys', group })));
    const result = await cli('group-stats', 'wide-keys');
    expect(result.code, result.stderr).toBe(0);
    const rows = result.stdout.trimEnd().split('\n').slice(2);
    expect(rows).toHaveLength(keys.length);
    // Every other cell is alike, so aligned rows are as wide on screen (outside review 193: padded by length).
    expect(new Set(rows.map((row) => stringWidth(row))).size).toBe(1);
  });

  it('sluice stats adds the groups of grouped queues: with due jobs, with running jobs, throttled', async () => {
    await queue.enqueueMany([
      ...['x', 'x', 'y'].map((group) => ({ task: 't', queue: 'tenants', group })),
      { task: 't', queue: 'tenants', group: 'z', delayMs: 3_600_000 },
      { task: 't', queue: 'plain-stats' },
      // Outside review 94: a queue no worker has claimed from and with no group settings
      // is not marked grouped yet, and its groups were left out.
      ...['a', 'a', 'b'].map((group) => ({ task: 't', queue: 'fresh-groups', group })),
    ]);
    // One of x's jobs runs, and x may run one at a time: its other due job is held back.
    await db.pool.query(
      `UPDATE ${db.s}.jobs SET status = 'processing', locked_by = 'test', locked_at = now(), started_at = now(), attempts = 1
       WHERE id = (SELECT min(id) FROM ${db.s}.jobs WHERE queue = 'tenants')`,
    );
    expect((await cli('groups', 'tenants', '--limit', '1')).code).toBe(0);

    const table = await runCli(db.url, db.schema, ['stats']);
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout).toMatch(/^GROUPED QUEUE\s+GROUPS\s+WITH DUE JOBS\s+WITH RUNNING JOBS\s+THROTTLED$/m);
    expect(table.stdout).toMatch(/^tenants\s+3\s+2\s+1\s+1$/m);
    expect(table.stdout).toMatch(/^fresh-groups\s+2\s+2\s+0\s+0$/m);
    expect(table.stdout).not.toMatch(/^plain-stats\s+\d+\s+\d+\s+\d+\s+\d+$/m);

    const json = JSON.parse((await runCli(db.url, db.schema, ['stats', '--json'])).stdout) as {
      queues: { queue: string; groups?: unknown }[];
    };
    expect(json.queues.find((q) => q.queue === 'tenants')?.groups).toEqual({
      total: 3,
      withDue: 2,
      withRunning: 1,
      throttled: 1,
    });
    expect(json.queues.find((q) => q.queue === 'plain-stats')).not.toHaveProperty('groups');

    // At its own concurrency limit of 1, the queue holds x's and y's due jobs back,
    // though no group limit does for y (outside review 193: "0 throttled" said nothing of it).
    expect((await cli('groups', 'tenants', '--limit', 'none')).code).toBe(0);
    expect((await cli('limit', 'tenants', '1')).code).toBe(0);
    const held = await cli('group-stats', 'tenants');
    expect(held.stdout.split('\n')[0]).toBe(
      "tenants: 3 groups, 2 due, 1 running, 0 throttled; the queue's own limit holds every due job now",
    );
    expect((await cli('limit', 'tenants', 'none')).code).toBe(0);
    expect((await cli('group-stats', 'tenants')).stdout.split('\n')[0]).toBe('tenants: 3 groups, 2 due, 1 running, 0 throttled');
  });
});
