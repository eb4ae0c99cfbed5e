import pg from 'pg';
import { Queue } from '../queue.js';
import { Worker } from '../worker/worker.js';
import { migrate } from '../migrate.js';
import { demoStatements } from '../db/statements/demo.js';
import { connectionError } from '../db/connection.js';
import { isConnectionFailure } from '../errors.js';

export interface DemoOptions {
  connectionString: string;
  jobs: number;
  workers: number;
  concurrency: number;
  /** Where progress and results go. */
  out: NodeJS.WritableStream & { isTTY?: boolean };
}

export interface DemoResult {
  jobs: number;
  seconds: number;
  jobsPerSecond: number;
  perWorker: Record<string, number>;
  ranExactlyOnce: boolean;
}

export const DEMO_SCHEMA = 'sluice_demo';

/** Another `sluice demo` runs on the database: this one would drop its schema under it. */
export class DemoRunningError extends Error {}

/**
 * The quick-start demo: jobs enqueued in the same transaction as the rows they
 * are about, a rolled-back transaction that leaves no job behind, and several
 * workers that claim different jobs without waiting on each other.
 */
export async function runDemo(options: DemoOptions): Promise<DemoResult> {
  const { out } = options;
  const sql = demoStatements(DEMO_SCHEMA);
  const pool = new pg.Pool({ connectionString: options.connectionString, max: 5 });
  pool.on('error', () => {});
  const queue = new Queue({ pool, schema: DEMO_SCHEMA });
  const workers: Worker[] = [];
  // Held until the end, on a connection of its own: a second demo dropped the first's
  // schema and tables, which then failed with a stack trace (outside review 241).
  const lock = await pool.connect().catch(async (err: unknown) => {
    await pool.end();
    // "cannot reach Postgres at …", not pg's own error and its stack (outside review 266).
    throw isConnectionFailure(err) ? connectionError(err, options.connectionString) : err;
  });
  // A checked-out client has no pool listener: its connection cut (Ctrl-C stops the embedded
  // Postgres under it) was an unhandled 'error' and a stack trace (outside review 251).
  lock.on('error', () => {});
  try {
    if (!(await lock.query<{ ok: boolean }>(sql.lockDemo)).rows[0]!.ok) {
      throw new DemoRunningError(
        `another sluice demo is running on this database (the demo drops and rebuilds the "${DEMO_SCHEMA}" schema): wait for it to finish`,
      );
    }
    await pool.query(sql.dropSchema);
    await migrate({ connectionString: options.connectionString, schema: DEMO_SCHEMA });
    await pool.query(sql.createUsers);
    await pool.query(sql.createRuns);
    out.write(`schema "${DEMO_SCHEMA}" migrated\n`);

    // 1. Users and their welcome jobs commit together.
    let ghostId: number;
    const client = await pool.connect();
    client.on('error', () => {}); // as the lock's: its queries fail, and say why
    try {
      await client.query('BEGIN');
      const { rows: users } = await client.query<{ id: number }>(sql.insertUsers, [options.jobs]);
      await queue.enqueueMany(
        users.map((u) => ({ task: 'send_welcome', payload: { userId: u.id } })),
        { tx: client },
      );
      await client.query('COMMIT');
      out.write(`committed ${users.length} users and ${users.length} welcome jobs in one transaction\n`);

      // 2. A rolled-back signup leaves neither a user nor a phantom job.
      await client.query('BEGIN');
      const { rows } = await client.query<{ id: number }>(sql.insertGhost);
      ghostId = rows[0]!.id;
      await queue.enqueue('send_welcome', { userId: ghostId }, { tx: client });
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    const ghost = await pool.query(sql.jobsOfUser, [ghostId]);
    out.write(`rolled back a signup: ${ghost.rows[0].n} jobs left behind for it (no phantom job)\n`);

    // 3. Several workers drain the queue; each records which jobs it ran.
    const started = Date.now();
    for (let i = 1; i <= options.workers; i++) {
      const name = `worker-${i}`;
      const worker = new Worker({
        connectionString: options.connectionString,
        schema: DEMO_SCHEMA,
        workerId: name,
        concurrency: options.concurrency,
        tasks: {
          send_welcome: async (_payload, { job }) => {
            // Stands in for sending an email.
            await pool.query(sql.recordRun, [job.id, name]);
          },
        },
      });
      worker.on('error', (err) => out.write(`\n${name}: ${err.message}\n`));
      workers.push(worker);
    }
    await Promise.all(workers.map((w) => w.start()));
    out.write(`started ${options.workers} workers (concurrency ${options.concurrency} each)\n`);

    let done = 0;
    while (done < options.jobs) {
      await new Promise((r) => setTimeout(r, 100));
      const { rows } = await pool.query(sql.completedJobs);
      done = rows[0].n;
      progress(out, done, options.jobs);
    }
    const seconds = (Date.now() - started) / 1000;
    out.write('\n');
    await Promise.all(workers.map((w) => w.stop()));

    const { rows: per } = await pool.query<{ worker: string; n: number }>(sql.runsPerWorker);
    const { rows: check } = await pool.query(sql.runsCheck);
    const result: DemoResult = {
      jobs: options.jobs,
      seconds,
      jobsPerSecond: Math.round(options.jobs / seconds),
      perWorker: Object.fromEntries(per.map((r) => [r.worker, r.n])),
      ranExactlyOnce:
        check[0].runs === options.jobs && check[0].distinct_jobs === options.jobs && check[0].completed === options.jobs,
    };
    out.write(`\n${options.jobs} jobs in ${seconds.toFixed(2)} s = ${result.jobsPerSecond} jobs/s\n`);
    for (const r of per) out.write(`  ${r.worker} ran ${r.n} jobs\n`);
    out.write(result.ranExactlyOnce ? 'every job ran exactly once\n' : 'MISMATCH: some job did not run exactly once\n');
    return result;
  } finally {
    await Promise.all(workers.map((w) => w.stop()));
    lock.release(true); // the session, and with it the lock, ends
    await pool.end();
  }
}

function progress(out: DemoOptions['out'], done: number, total: number): void {
  const width = 30;
  const filled = Math.round((done / total) * width);
  const line = `[${'#'.repeat(filled)}${' '.repeat(width - filled)}] ${done}/${total} jobs`;
  if (out.isTTY) out.write(`\r${line}`);
  else if (done === total) out.write(line);
}
