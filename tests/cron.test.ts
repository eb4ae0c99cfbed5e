import pg from 'pg';
import { describe, expect, it, vi } from 'vitest';
import {
  ConfigError,
  DatabaseError,
  deleteSchedule,
  listSchedules,
  runScheduleNow,
  ValidationError,
  Worker,
  type CronSchedule,
  type CronTick,
} from '../src/index.js';
import { runDoctor } from '../src/doctor/run-doctor.js';
import { dueTicks, nextTick, parseCron, resolveSchedules } from '../src/maintenance/cron-schedule.js';
import { CRON_IDLE_LIMIT, cronStatements } from '../src/db/statements/cron.js';
import { waitFor } from './helpers/database.js';
import { useWorkers } from './helpers/workers.js';
import { runCli } from './helpers/cli.js';

const fx = useWorkers('cron');

async function tickJobs(schedule: string): Promise<{ job_key: string; run_at: Date }[]> {
  const { rows } = await fx.db.pool.query(`SELECT job_key, run_at FROM ${fx.db.s}.jobs WHERE job_key LIKE $1 ORDER BY run_at`, [
    `cron:${schedule}:%`,
  ]);
  return rows;
}

/** Starts `n` workers with the same schedules at once, as a deploy of several replicas would. */
async function startReplicas(
  n: number,
  schedules: CronSchedule[],
  queue: string,
): Promise<{ workers: Worker[]; ticks: CronTick[] }> {
  const ticks: CronTick[] = [];
  const workers = await Promise.all(
    Array.from({ length: n }, () =>
      fx.start({ queues: [queue], schedules, tasks: { [schedules[0]!.task]: async () => {} } }, (w) =>
        w.on('cron:enqueued', (t) => ticks.push(...t)),
      ),
    ),
  );
  return { workers, ticks };
}

/** The newest midnights of 1 January in Berlin (23:00 UTC on 31 December) at or before now. */
function newYearsInBerlin(count: number): string[] {
  let year = new Date().getUTCFullYear();
  if (Date.UTC(year - 1, 11, 31, 23) > Date.now()) year--;
  return Array.from({ length: count }, (_, i) => new Date(Date.UTC(year - 1 - i, 11, 31, 23)).toISOString()).reverse();
}

describe('recurring jobs', () => {
  it('three workers enqueue every tick of a per-second schedule exactly once, no gaps', async () => {
    const schedule: CronSchedule = { name: 'every-second', cron: '* * * * * *', task: 'tick', queue: 'cron-live', backfill: 5 };
    const { workers, ticks } = await startReplicas(3, [schedule], 'cron-live');
    await waitFor(async () => (await tickJobs('every-second')).length >= 4, 'four ticks');
    await Promise.all(workers.map((w) => w.stop()));
    const jobs = await tickJobs('every-second');
    const times = jobs.map((j) => j.run_at.getTime());
    // One job per tick, and consecutive seconds from the first to the last.
    expect(new Set(jobs.map((j) => j.job_key)).size).toBe(jobs.length);
    expect(times.every((t, i) => i === 0 || t - times[i - 1]! === 1_000)).toBe(true);
    expect(jobs.map((j) => j.job_key)).toEqual(times.map((t) => `cron:every-second:${new Date(t).toISOString()}`));
    // Each tick was enqueued by exactly one of the workers.
    expect(ticks.map((t) => t.tick.getTime()).sort((a, b) => a - b)).toEqual(times);
  });

  it("a schedule's row held by another session holds up that schedule alone: the others tick, and stop() does not wait for it (outside review 200)", async () => {
    const held: CronSchedule = { name: 'held-row', cron: '* * * * * *', task: 'tick', queue: 'cron-held', backfill: 5 };
    const free: CronSchedule = { name: 'free-row', cron: '* * * * * *', task: 'tick', queue: 'cron-held' };
    const { workers, ticks } = await startReplicas(2, [held, free], 'cron-held');
    await waitFor(() => ticks.some((t) => t.schedule === 'held-row'), 'the held schedule to tick once');
    const admin = await fx.db.pool.connect();
    const errors: Error[] = [];
    for (const w of workers) w.on('error', (err) => errors.push(err));
    try {
      await admin.query('BEGIN');
      await admin.query(`SELECT 1 FROM ${fx.db.s}.cron_schedules WHERE name = 'held-row' FOR UPDATE`);
      const heldTicks = ticks.filter((t) => t.schedule === 'held-row').length;
      const freeTicks = ticks.filter((t) => t.schedule === 'free-row').length;
      // Waited for, the lock stopped every schedule behind it.
      await waitFor(
        () => ticks.filter((t) => t.schedule === 'free-row').length >= freeTicks + 3,
        'the other schedule to tick on',
      );
      expect(ticks.filter((t) => t.schedule === 'held-row').length).toBe(heldTicks);
      await Promise.all(workers.map((w) => w.stop()));
    } finally {
      await admin.query('ROLLBACK');
      admin.release();
    }
    expect(errors).toEqual([]);
    // Nothing was enqueued twice.
    const jobs = await tickJobs('held-row');
    expect(new Set(jobs.map((j) => j.job_key)).size).toBe(jobs.length);
  });

  it('after downtime enqueues the newest missed tick plus `backfill` older ones, once, and a restart adds nothing', async () => {
    const backfilled: CronSchedule = {
      name: 'new-year',
      cron: '0 0 1 1 *',
      timezone: 'Europe/Berlin',
      task: 'ny',
      queue: 'cron-down',
      backfill: 1,
    };
    const plain: CronSchedule = {
      name: 'new-year-plain',
      cron: '0 0 1 1 *',
      timezone: 'Europe/Berlin',
      task: 'ny',
      queue: 'cron-down',
    };
    // First deploy: the schedules are registered and start counting from now.
    const first = await startReplicas(1, [backfilled, plain], 'cron-down');
    await Promise.all(first.workers.map((w) => w.stop()));
    expect(await tickJobs('new-year')).toEqual([]);
    // Three years of downtime.
    await fx.db.pool.query(`UPDATE ${fx.db.s}.cron_schedules SET last_tick = now() - interval '3 years 1 day'`);
    const second = await startReplicas(3, [backfilled, plain], 'cron-down');
    await waitFor(
      async () => (await tickJobs('new-year-plain')).length === 1 && (await tickJobs('new-year')).length === 2,
      'missed ticks',
    );
    await Promise.all(second.workers.map((w) => w.stop()));
    const expected = newYearsInBerlin(2);
    expect((await tickJobs('new-year')).map((j) => j.run_at.toISOString())).toEqual(expected);
    expect((await tickJobs('new-year-plain')).map((j) => j.run_at.toISOString())).toEqual([expected[1]]);
    // A restart carries on from the stored last tick: nothing new.
    const third = await startReplicas(2, [backfilled, plain], 'cron-down');
    const [info] = (await listSchedules(fx.db.pool, fx.db.schema)).filter((s) => s.name === 'new-year');
    await Promise.all(third.workers.map((w) => w.stop()));
    expect(info!.lastTick?.toISOString()).toBe(expected[1]);
    expect(info!.nextRun!.getTime()).toBe(
      new Date(expected[1]!).getTime() + 365 * 86_400_000 + (isLeap(expected[1]!) ? 86_400_000 : 0),
    );
    expect(await tickJobs('new-year')).toHaveLength(2);
    expect(await tickJobs('new-year-plain')).toHaveLength(1);
  });

  it('sluice cron list shows the schedules with their next run', async () => {
    await startReplicas(
      1,
      [{ name: 'hourly-report', cron: '0 * * * *', timezone: 'Asia/Tokyo', task: 'report', queue: 'cron-cli' }],
      'cron-cli',
    );
    const json = await cli(['cron', 'list', '--json']);
    expect(json.code).toBe(0);
    const listed = (JSON.parse(json.stdout) as { name: string; timezone: string; nextRun: string }[]).find(
      (s) => s.name === 'hourly-report',
    );
    expect(listed).toMatchObject({ timezone: 'Asia/Tokyo' });
    expect(new Date(listed!.nextRun).getUTCMinutes()).toBe(0);
    expect(new Date(listed!.nextRun).getTime()).toBeGreaterThan(Date.now() - 5_000);
    const text = await cli(['cron', 'list']);
    expect(text.stdout).toMatch(/hourly-report\s+0 \* \* \* \*\s+Asia\/Tokyo\s+cron-cli\/report/);
  });

  it('a schedule no worker ticks is listed as overdue, and deleteSchedule / sluice cron delete remove it, audited (outside review 83)', async () => {
    const { workers } = await startReplicas(
      1,
      [{ name: 'gone-from-code', cron: '* * * * *', task: 'old', queue: 'cron-gone' }],
      'cron-gone',
    );
    await workers[0]!.stop();
    const find = async () => (await listSchedules(fx.db.pool, fx.db.schema)).find((s) => s.name === 'gone-from-code');
    expect((await find())?.overdueSince).toBeNull();
    // As if its workers had left it ten minutes ago: the minute after is long past, and nothing enqueued it.
    await fx.db.pool.query(
      `UPDATE ${fx.db.s}.cron_schedules SET last_tick = now() - interval '10 minutes', created_at = now() - interval '10 minutes'
       WHERE name = 'gone-from-code'`,
    );
    const overdue = await find();
    expect(overdue!.overdueSince!.getTime()).toBeLessThan(Date.now() - 8 * 60_000);
    expect(overdue!.nextRun!.getTime()).toBeGreaterThan(Date.now() - 5_000);
    expect((await cli(['cron', 'list'])).stdout).toMatch(/gone-from-code .* overdue since \d{4}-/);
    // The doctor says so too (outside review 182: all checks passed): warn, critical after an hour.
    const cronCheck = async (thresholds = {}) =>
      (await runDoctor({ db: fx.db.pool, schema: fx.db.schema, thresholds })).checks.find((c) => c.id === 'cron')!;
    const found = await cronCheck();
    expect(found.details).toContainEqual(expect.objectContaining({ name: 'gone-from-code', status: 'warn' }));
    expect(found.summary).toMatch(/gone-from-code \(\* \* \* \* \*\): overdue (9|10) ?m/);
    expect(found.advice).toMatch(/sluice cron delete/);
    const late = await cronCheck({ cronOverdueMs: [60_000, 300_000] });
    expect(late.details).toContainEqual(expect.objectContaining({ name: 'gone-from-code', status: 'critical' }));
    // On the database's clock, not this process's (outside review 224: a client clock days off made it 'critical').
    const realNow = Date.now;
    Date.now = () => realNow() + 30 * 86_400_000;
    try {
      expect((await cronCheck()).details).toContainEqual(expect.objectContaining({ name: 'gone-from-code', status: 'warn' }));
    } finally {
      Date.now = realNow;
    }

    expect(await deleteSchedule(fx.db.pool, fx.db.schema, 'gone-from-code', { actor: 'ops' })).toBe(true);
    expect(await find()).toBeUndefined();
    expect((await cronCheck()).details).not.toContainEqual(expect.objectContaining({ name: 'gone-from-code' }));
    expect(await deleteSchedule(fx.db.pool, fx.db.schema, 'gone-from-code')).toBe(false);
    // Outside review 84: undefined deleted a schedule named "undefined".
    for (const bad of [undefined, null, '', 'a\u0000b'])
      await expect(deleteSchedule(fx.db.pool, fx.db.schema, bad as never), String(bad)).rejects.toThrow(ValidationError);
    const { rows } = await fx.db.pool.query(
      `SELECT action, actor, detail FROM ${fx.db.s}.audit_log WHERE queue = 'cron-gone' ORDER BY id`,
    );
    expect(rows).toEqual([
      {
        action: 'delete_schedule',
        actor: 'ops',
        detail: { name: 'gone-from-code', cron: '* * * * *', timezone: 'UTC', task: 'old' },
      },
    ]);
    const missing = await cli(['cron', 'delete', 'gone-from-code']);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/no schedule named "gone-from-code"/);
    await startReplicas(1, [{ name: 'again', cron: '0 0 * * *', task: 'old', queue: 'cron-gone' }], 'cron-gone');
    const deleted = await cli(['cron', 'delete', 'again']);
    expect(deleted).toMatchObject({ code: 0, stdout: 'deleted schedule again\n' });
  });

  it('a last tick ahead of the database clock is shown, with the next run after it, and the doctor warns (outside review 248)', async () => {
    const { workers } = await startReplicas(
      1,
      [{ name: 'ahead', cron: '*/10 * * * *', task: 'old', queue: 'cron-ahead' }],
      'cron-ahead',
    );
    await workers[0]!.stop();
    const find = async () => (await listSchedules(fx.db.pool, fx.db.schema)).find((s) => s.name === 'ahead')!;
    expect((await find()).aheadOfClock).toBeNull();
    // A clock stepped back two hours, or the row edited: the workers enqueue nothing until then.
    const { rows } = await fx.db.pool.query(
      `UPDATE ${fx.db.s}.cron_schedules SET last_tick = date_trunc('hour', now()) + interval '2 hours' WHERE name = 'ahead' RETURNING last_tick`,
    );
    const lastTick = rows[0].last_tick as Date;
    const ahead = await find();
    expect(ahead.aheadOfClock).toEqual(lastTick);
    // Not the next tick after now, which never fires.
    expect(ahead.nextRun).toEqual(new Date(lastTick.getTime() + 10 * 60_000));
    // The table says why too, not only --json (outside review 279).
    expect((await cli(['cron', 'list'])).stdout).toMatch(/\nahead\s.*\(held: its last tick is ahead of the clock\)\n/);
    const report = await runDoctor({ db: fx.db.pool, schema: fx.db.schema });
    const check = report.checks.find((c) => c.id === 'cron')!;
    // Other tests' schedules share the schema: this one's entry and sentence.
    expect(check.details).toContainEqual(expect.objectContaining({ name: 'ahead', status: 'critical' }));
    expect(check.summary).toMatch(/ahead \(\*\/10 \* \* \* \*\): last tick [\d.]+ (min|h) ahead of the database clock/);
    expect(check.advice).toMatch(/A last tick ahead of the database clock .*sluice cron delete/);
    expect(await deleteSchedule(fx.db.pool, fx.db.schema, 'ahead')).toBe(true);
  });

  it("a tick that fails is reported as that schedule's, and the schedule ticks once the cause is gone (outside review 248)", async () => {
    // Postgres refuses the tick's job (a trigger of the test's own) until the trigger is dropped.
    await fx.db.pool.query(`
      CREATE FUNCTION ${fx.db.s}.refuse_ticks() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'no ticks today'; END $$;
      CREATE TRIGGER refuse_ticks BEFORE INSERT ON ${fx.db.s}.jobs FOR EACH ROW
        WHEN (NEW.job_key LIKE 'cron:refused:%') EXECUTE FUNCTION ${fx.db.s}.refuse_ticks();`);
    const errors: string[] = [];
    await fx.start(
      {
        queues: ['cron-refused'],
        schedules: [{ name: 'refused', cron: '* * * * * *', task: 'r', queue: 'cron-refused' }],
        tasks: { r: async () => {} },
      },
      (w) => w.on('error', (err) => errors.push(err.message)),
    );
    try {
      await waitFor(() => errors.length > 0, 'a refused tick');
      expect(errors[0]).toMatch(/^worker cron: schedule "refused": .*no ticks today/);
    } finally {
      await fx.db.pool.query(`DROP TRIGGER refuse_ticks ON ${fx.db.s}.jobs; DROP FUNCTION ${fx.db.s}.refuse_ticks()`);
    }
    await waitFor(async () => (await tickJobs('refused')).length > 0, 'a tick once the trigger is gone');
  });

  it("puts a schedule's jobs in its group, ticks and Run now alike (outside review 169)", async () => {
    const schedule: CronSchedule = {
      name: 'tenant-sync',
      cron: '* * * * * *',
      task: 'sync',
      queue: 'cron-grouped',
      group: 'system',
    };
    const { workers } = await startReplicas(1, [schedule], 'cron-grouped');
    await waitFor(async () => (await tickJobs('tenant-sync')).length >= 1, 'a tick');
    await Promise.all(workers.map((w) => w.stop()));
    expect((await listSchedules(fx.db.pool, fx.db.schema)).find((s) => s.name === 'tenant-sync')?.group).toBe('system');
    expect((await cli(['cron', 'list'])).stdout).toContain('cron-grouped/sync (group system)');
    const extra = await runScheduleNow(fx.db.pool, fx.db.schema, 'tenant-sync');
    const { rows } = await fx.db.pool.query(
      `SELECT DISTINCT group_key FROM ${fx.db.s}.jobs WHERE task = 'sync' AND (job_key LIKE 'cron:tenant-sync:%' OR id = $1)`,
      [extra!.id],
    );
    expect(rows).toEqual([{ group_key: 'system' }]);
    // A definition without the group puts the schedule's next jobs in none.
    const { workers: again } = await startReplicas(1, [{ ...schedule, group: null }], 'cron-grouped');
    await Promise.all(again.map((w) => w.stop()));
    expect((await listSchedules(fx.db.pool, fx.db.schema)).find((s) => s.name === 'tenant-sync')?.group).toBeNull();
  });

  it('rejects bad schedules with ConfigError', () => {
    const base = { connectionString: 'postgres://x', tasks: { t: async () => {} } };
    const bad: unknown[] = [
      [{ name: 'a', cron: 'not cron', task: 't' }],
      [{ name: 'a', cron: '* * * * *', timezone: 'Mars/Olympus', task: 't' }],
      [
        { name: 'a', cron: '* * * * *', task: 't' },
        { name: 'a', cron: '* * * * *', task: 't' },
      ],
      [{ name: 'a', cron: '* * * * *', task: 't', backfill: 1001 }],
      [{ name: 'a', cron: '* * * * *', task: 't', every: 5 }],
      // A date that never comes, and a seventh (year) field (outside review 75).
      [{ name: 'a', cron: '0 0 30 2 *', task: 't' }],
      [{ name: 'a', cron: '0 0 0 1 1 * 2099', task: 't' }],
      [{ name: 'a\tb', cron: '* * * * *', task: 't' }],
      [{ name: ' ', cron: '* * * * *', task: 't' }],
      [{ name: 'a\u2028b', cron: '* * * * *', task: 't' }],
      [{ name: 'a', cron: '* * * * *', task: 't', group: '' }],
      [{ name: 'a', cron: '* * * * *', task: 't', group: 'g'.repeat(129) }],
      [{ name: 'a', cron: '* * * * *', task: 't', group: 7 }],
    ];
    for (const schedules of bad)
      expect(() => new Worker({ ...base, schedules: schedules as CronSchedule[] })).toThrow(ConfigError);
  });

  it("listSchedules on a schema that was never migrated is a DatabaseError saying so (outside review 217: pg's bare error)", async () => {
    const error = await listSchedules(fx.db.pool, 'no_such_schema_here').catch((err: unknown) => err);
    expect(error).toBeInstanceOf(DatabaseError);
    expect((error as Error).message).toMatch(/^listSchedules failed: .*run `sluice migrate`/);
  });

  it('says a date that never comes never fires, also where croner overflows its stack looking for it (outside review 217)', () => {
    for (const cron of ['0 0 30 2 *', '0 0 31 4,6,9,11 *', '0 0 31 2,4,6,9,11 *'])
      expect(() => parseCron('s', cron, 'UTC'), cron).toThrow(`schedule "s": cron ${JSON.stringify(cron)} never fires`);
  });

  it('reads `?` in a day field as `*`: a weekly or monthly pattern in Quartz style does not fire daily (outside review 264)', () => {
    const monday = new Date('2026-12-07T12:00:00Z');
    for (const [quartz, plain] of [
      ['0 3 ? * FRI', '0 3 * * FRI'],
      ['0 3 15 * ?', '0 3 15 * *'],
      ['0 0 3 ? * 1', '0 0 3 * * 1'],
      ['0 3 ? * 5#3', '0 3 * * 5#3'],
    ]) {
      const next = nextTick(parseCron('q', quartz, 'UTC'), monday);
      expect(next?.toISOString(), quartz).toBe(nextTick(parseCron('p', plain, 'UTC'), monday)?.toISOString());
      expect(next!.getUTCDate(), quartz).not.toBe(8);
    }
  });

  it('names the field counts it takes when a cron has too few fields, not the seven croner offers (outside review 192)', () => {
    for (const cron of ['bad', '* * *', '0 0 0 1 1 * 2099'])
      expect(() => parseCron('s', cron, 'UTC')).toThrow(/fields; 5, or 6 with seconds first$/);
  });

  it('nextTick is after the time asked from inside an hour that repeats (outside review 217: croner answered the past, and workers looked every 20 ms)', () => {
    const nightly = parseCron('n', '30 1 * * *', 'America/New_York');
    // 1 November 2026: 01:00-02:00 EDT (05:00-06:00Z), then 01:00-02:00 EST (06:00-07:00Z).
    for (const at of ['2026-11-01T06:29:00Z', '2026-11-01T06:45:00Z', '2026-11-01T05:45:00Z'])
      expect(nextTick(nightly, new Date(at))!.toISOString(), at).toBe('2026-11-02T06:30:00.000Z');
    expect(nextTick(nightly, new Date('2026-11-01T05:20:00Z'))!.toISOString()).toBe('2026-11-01T05:30:00.000Z');
    // Inside the repeated hour, the first tick after it, not one a step jumped over.
    const quarterly = parseCron('q', '*/15 * * * *', 'America/New_York');
    for (let m = 0; m < 60; m += 7) {
      const at = new Date(Date.parse('2026-11-01T06:00:00Z') + m * 60_000);
      expect(nextTick(quarterly, at)!.toISOString(), at.toISOString()).toBe('2026-11-01T07:00:00.000Z');
    }
  });

  it('doctor and listSchedules name a stored pattern this version cannot read (outside review 267: never ticked, never flagged)', async () => {
    await fx.db.pool.query(
      `INSERT INTO ${fx.db.s}.cron_schedules (name, cron, timezone, task, queue, last_tick)
       VALUES ('unreadable', '61 * * * *', 'UTC', 't', 'default', now() - interval '2 hours')`,
    );
    try {
      const listed = (await listSchedules(fx.db.pool, fx.db.schema)).find((s) => s.name === 'unreadable')!;
      expect(listed.nextRun).toBeNull();
      expect(listed.patternError).toMatch(/schedule "unreadable": invalid cron "61 \* \* \* \*"/);
      expect((await cli(['cron', 'list'])).stdout).toMatch(
        /\nunreadable\s.*none: schedule "unreadable": invalid cron "61 \* \* \* \*"/,
      );
      const cron = (await runDoctor({ db: fx.db.pool, schema: fx.db.schema })).checks.find((c) => c.id === 'cron')!;
      expect(cron.status).not.toBe('ok');
      expect(cron.summary).toMatch(/unreadable \(61 \* \* \* \*\): cannot be read \(schedule "unreadable": invalid cron/);
    } finally {
      await fx.db.pool.query(`DELETE FROM ${fx.db.s}.cron_schedules WHERE name = 'unreadable'`);
    }
  });

  it("a schedule's transaction left idle (a frozen worker) ends after CRON_IDLE_LIMIT and frees the row (outside review 217)", async () => {
    const name = 'frozen-holder';
    await fx.db.pool.query(
      `INSERT INTO ${fx.db.s}.cron_schedules (name, cron, timezone, task, queue, last_tick) VALUES ($1, '* * * * *', 'UTC', 't', 'default', now())`,
      [name],
    );
    const frozen = new pg.Client({ connectionString: fx.db.url });
    frozen.on('error', () => {});
    await frozen.connect();
    const pid = (await frozen.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
    await frozen.query('BEGIN');
    const lock = cronStatements(fx.db.schema).lockSchedule;
    expect((await frozen.query(lock, [name])).rows[0].last_tick).not.toBeNull();
    // Held: a look from elsewhere skips it.
    expect((await fx.db.pool.query(lock, [name])).rows[0].last_tick).toBeNull();
    // The frozen session sends nothing more; Postgres ends it, and the row is free.
    await waitFor(
      async () => (await fx.db.pool.query('SELECT 1 FROM pg_stat_activity WHERE pid = $1', [pid])).rowCount === 0,
      `the idle session ended (${CRON_IDLE_LIMIT})`,
      30_000,
    );
    expect((await fx.db.pool.query(lock, [name])).rows[0].last_tick).not.toBeNull();
    await frozen.end().catch(() => {});
    await fx.db.pool.query(`DELETE FROM ${fx.db.s}.cron_schedules WHERE name = $1`, [name]);
  });

  it('dueTicks keeps the newest 1 + backfill ticks after the last one, across a DST change', () => {
    const daily = parseCron('d', '30 2 * * *', 'Europe/Berlin');
    // 2:30 does not exist on 29 March 2026 in Berlin (clocks jump 2:00 → 3:00).
    const ticks = dueTicks(daily, new Date('2026-03-26T12:00:00Z'), new Date('2026-03-31T12:00:00Z'), 10);
    expect(ticks.map((t) => t.toISOString())).toEqual([
      '2026-03-27T01:30:00.000Z',
      '2026-03-28T01:30:00.000Z',
      '2026-03-29T01:30:00.000Z',
      '2026-03-30T00:30:00.000Z',
      '2026-03-31T00:30:00.000Z',
    ]);
    expect(dueTicks(daily, new Date('2026-03-26T12:00:00Z'), new Date('2026-03-31T12:00:00Z'), 0)).toHaveLength(1);
  });

  it('dueTicks keeps a full backfill of distinct ticks across a DST change of a schedule of every minute (outside review 76)', () => {
    const minutely = parseCron('m', '* * * * *', 'Europe/Berlin');
    // croner lists each skipped 02:xx again as 03:xx: 60 duplicates in this span.
    const ticks = dueTicks(minutely, new Date('2026-03-28T00:00:00Z'), new Date('2026-03-29T01:30:00Z'), 100);
    expect(ticks).toHaveLength(101);
    expect(new Set(ticks.map((t) => t.getTime())).size).toBe(101);
    expect(ticks[0]!.toISOString()).toBe('2026-03-28T23:50:00.000Z');
    expect(ticks.at(-1)!.toISOString()).toBe('2026-03-29T01:30:00.000Z');
  });

  it('dueTicks finds the ticks of a pattern croner cannot search backwards (29 February, outside review 76)', () => {
    const leap = parseCron('leap', '0 0 29 2 *', 'UTC');
    expect(dueTicks(leap, new Date('2026-12-01T00:00:00Z'), new Date('2026-12-03T00:00:00Z'), 3)).toEqual([]);
    expect(
      dueTicks(leap, new Date('2026-12-01T00:00:00Z'), new Date('2028-03-01T00:00:00Z'), 3).map((t) => t.toISOString()),
    ).toEqual(['2028-02-29T00:00:00.000Z']);
    const fifthFriday = parseCron('ff', '0 0 * 2 5#5', 'UTC');
    expect(
      dueTicks(fifthFriday, new Date('2020-01-01T00:00:00Z'), new Date('2040-01-01T00:00:00Z'), 0).map((t) => t.toISOString()),
    ).toEqual(['2036-02-29T00:00:00.000Z']);
  });

  it('dueTicks walks no further back than the ticks due, whatever the backfill (outside review 244)', () => {
    const nightly = parseCron('n', '0 3 * * *', 'UTC');
    const back = vi.spyOn(nightly, 'previousRuns');
    // Nothing due, then one tick due: the 1,000 ticks a backfill may take are not looked for.
    expect(dueTicks(nightly, new Date('2026-12-07T03:00:00Z'), new Date('2026-12-07T12:00:00Z'), 1_000)).toEqual([]);
    expect(
      dueTicks(nightly, new Date('2026-12-07T03:00:00Z'), new Date('2026-12-08T03:00:01Z'), 1_000).map((t) => t.toISOString()),
    ).toEqual(['2026-12-08T03:00:00.000Z']);
    expect(back).not.toHaveBeenCalled();
    // More missed than the backfill keeps: the newest 1 + backfill, found walking back.
    const missed = dueTicks(nightly, new Date('2026-01-01T03:00:00Z'), new Date('2026-12-08T04:00:00Z'), 2);
    expect(missed.map((t) => t.toISOString())).toEqual([
      '2026-12-06T03:00:00.000Z',
      '2026-12-07T03:00:00.000Z',
      '2026-12-08T03:00:00.000Z',
    ]);
    expect(back).toHaveBeenCalled();
  });

  it('counts the characters of names, tasks and queues as enqueue does: code points (outside review 244)', () => {
    const emoji = '\u{1F600}';
    const [ok] = resolveSchedules([
      { name: emoji.repeat(128), cron: '* * * * *', task: emoji.repeat(128), queue: emoji.repeat(128) },
    ]);
    expect(ok!.task).toBe(emoji.repeat(128));
    for (const bad of [
      { name: emoji.repeat(129), cron: '* * * * *', task: 't' },
      { name: 'n', cron: '* * * * *', task: emoji.repeat(129) },
      { name: 'n', cron: '* * * * *', task: 't', queue: 'a\u0000b' },
    ]) {
      expect(() => resolveSchedules([bad])).toThrow(ConfigError);
    }
  });

  it('stores a time zone in its own spelling when only its case differs, an alias as given (outside review 248)', () => {
    const zones = resolveSchedules(
      ['europe/berlin', 'utc', 'AMERICA/NEW_YORK', 'US/Eastern', 'Europe/Berlin'].map((timezone, i) => ({
        name: `z${i}`,
        cron: '0 3 * * *',
        timezone,
        task: 't',
      })),
    ).map((s) => s.timezone);
    expect(zones).toEqual(['Europe/Berlin', 'UTC', 'America/New_York', 'US/Eastern', 'Europe/Berlin']);
  });

  it('dueTicks runs a tick of a repeated hour once (clocks going back)', () => {
    const early = parseCron('e', '30 1 * * *', 'America/New_York');
    // 1 November 2026: 01:30 local comes twice, at 05:30Z and 06:30Z.
    const ticks = dueTicks(early, new Date('2026-10-31T12:00:00Z'), new Date('2026-11-02T12:00:00Z'), 5);
    expect(ticks.map((t) => t.toISOString())).toEqual(['2026-11-01T05:30:00.000Z', '2026-11-02T06:30:00.000Z']);
  });

  it('dueTicks lists a tick once where a DST change moves a skipped one onto it (outside review 75)', () => {
    const hourly = parseCron('h', '0 * * * *', 'Europe/Berlin');
    // 02:00 local does not exist on 29 March 2026; croner moves it onto 03:00 (01:00Z).
    const ticks = dueTicks(hourly, new Date('2026-03-28T20:30:00Z'), new Date('2026-03-29T03:30:00Z'), 5);
    expect(ticks.map((t) => t.toISOString())).toEqual([
      '2026-03-28T22:00:00.000Z',
      '2026-03-28T23:00:00.000Z',
      '2026-03-29T00:00:00.000Z',
      '2026-03-29T01:00:00.000Z',
      '2026-03-29T02:00:00.000Z',
      '2026-03-29T03:00:00.000Z',
    ]);
  });
});

function isLeap(iso: string): boolean {
  const y = new Date(iso).getUTCFullYear() + 1; // the February that follows
  return (y % 4 === 0 && y % 100 !== 0) || y % 400 === 0;
}

function cli(args: string[]) {
  return runCli(fx.db.url, fx.db.schema, args);
}
