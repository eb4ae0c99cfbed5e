/**
 * Recurring jobs: schedules live in code and are given to the workers that should
 * enqueue them. Each tick becomes one job, however many workers carry the
 * schedule: here two workers share a per-second schedule for a few seconds.
 *
 *   DATABASE_URL=postgres://… npx tsx examples/cron.ts
 *
 * Works in a schema of its own (SLUICE_SCHEMA, default example_cron), recreated on
 * each run. Exits 0 when three ticks ran, each exactly once.
 */
import pg from 'pg';
import { migrate, Worker, type CronSchedule, type TaskList } from 'sluice';

const connectionString = process.env.DATABASE_URL;
const schema = process.env.SLUICE_SCHEMA ?? 'example_cron';
const pool = new pg.Pool({ connectionString });
await pool.query(`DROP SCHEMA IF EXISTS ${pg.escapeIdentifier(schema)} CASCADE`);
await migrate({ connectionString, schema });

const ran: string[] = [];
let threeTicks!: () => void;
const done = new Promise<void>((resolve) => (threeTicks = resolve));

const schedules: CronSchedule[] = [
  { name: 'nightly-report', cron: '0 3 * * *', timezone: 'Europe/Berlin', task: 'build_report', payload: { kind: 'daily' } },
  { name: 'heartbeat', cron: '* * * * * *', task: 'ping' }, // 6 fields: seconds first
];
const tasks: TaskList = {
  build_report: async ({ kind }) => console.log(`building the ${kind} report`),
  ping: async (_payload, { job }) => {
    ran.push(job.run_at.toISOString()); // run_at is the tick the job was enqueued for
    if (ran.length === 3) threeTicks();
  },
};
const workers = [1, 2].map(() => new Worker({ pool, schema, tasks, schedules }));

for (const worker of workers) {
  worker.on('error', (err) => console.error(err.message));
  worker.on('cron:enqueued', (ticks) => ticks.forEach((t) => console.log(`enqueued ${t.schedule} for ${t.tick.toISOString()}`)));
  await worker.start();
}
const timeout = setTimeout(threeTicks, 15_000);
await done;
clearTimeout(timeout);
await Promise.all(workers.map((w) => w.stop()));
const { rows } = await pool.query<{ run_at: Date; n: number }>(
  `SELECT run_at, count(*)::int AS n FROM ${pg.escapeIdentifier(schema)}.jobs WHERE task = 'ping' AND status = 'completed' GROUP BY run_at`,
);
await pool.end();

console.log(`ping ran for ${ran.length} ticks: ${ran.join(', ')}`);
const ok = ran.length >= 3 && new Set(ran).size === ran.length && rows.every((r) => r.n === 1);
console.log(ok ? 'ok: every tick once, across two workers' : 'FAILED');
process.exitCode = ok ? 0 : 1;
