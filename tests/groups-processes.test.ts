import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Queue } from '../src/index.js';
import { setQueueGroups, setQueueRateLimit } from '../src/groups/settings.js';
import { createTestSchema, waitFor, type TestDatabase } from './helpers/database.js';
import { spawnWorker, type WorkerProcess } from './helpers/processes.js';

// Group and rate limits across real worker processes, one of them SIGKILLed
// mid-run, checked from the start and end times every run recorded on the server
// clock (the `span` task of tests/fixtures/worker-process.ts).

let db: TestDatabase;
let queue: Queue;
const children: WorkerProcess[] = [];

beforeAll(async () => {
  db = await createTestSchema('groupprocs');
  queue = new Queue({ pool: db.pool, schema: db.schema });
  // No primary key: a job rerun after its worker was killed records a second span.
  await db.pool.query(`CREATE TABLE ${db.s}.spans (
    job_id bigint NOT NULL, worker text NOT NULL, started_at timestamptz NOT NULL, ended_at timestamptz)`);
});
afterAll(async () => {
  for (const c of children) if (c.child.exitCode === null) c.child.kill('SIGKILL');
  await queue.close();
  await db.drop();
});

function spawn(name: string, queueName: string, env: Record<string, string> = {}): Promise<WorkerProcess> {
  return spawnWorker({
    DATABASE_URL: db.url,
    SLUICE_SCHEMA: db.schema,
    WORKER_NAME: name,
    QUEUES: queueName,
    CONCURRENCY: '8',
    VISIBILITY_MS: '2000',
    ...env,
  }).then((w) => {
    children.push(w);
    return w;
  });
}

interface Span {
  group_key: string;
  worker: string;
  started_at: Date;
  ended_at: Date | null;
}

async function spansOf(queueName: string): Promise<Span[]> {
  const { rows } = await db.pool.query<Span>(
    `SELECT j.group_key, s.worker, s.started_at, s.ended_at FROM ${db.s}.spans s JOIN ${db.s}.jobs j ON j.id = s.job_id
     WHERE j.queue = $1 ORDER BY s.started_at`,
    [queueName],
  );
  return rows;
}

/** Most spans open at once; a killed worker's runs end when it was killed. */
function maxOverlap(list: Span[], killed: string, killedAt: Date): number {
  const events = list.flatMap((s) => {
    const end = s.worker === killed ? Math.min(s.ended_at?.getTime() ?? Infinity, killedAt.getTime()) : s.ended_at!.getTime();
    return [
      { at: s.started_at.getTime(), d: 1 },
      { at: end, d: -1 },
    ];
  });
  // At equal times an end comes first: touching spans do not overlap.
  events.sort((a, b) => a.at - b.at || a.d - b.d);
  let open = 0;
  let max = 0;
  for (const e of events) max = Math.max(max, (open += e.d));
  return max;
}

async function serverNow(): Promise<Date> {
  return (await db.pool.query<{ now: Date }>('SELECT clock_timestamp() AS now')).rows[0]!.now;
}

async function completed(queueName: string): Promise<number> {
  const { rows } = await db.pool.query(`SELECT count(*)::int AS n FROM ${db.s}.jobs WHERE queue = $1 AND status = 'completed'`, [
    queueName,
  ]);
  return rows[0].n as number;
}

async function stopAll(procs: WorkerProcess[]): Promise<void> {
  for (const p of procs) p.child.kill('SIGTERM');
  expect(await Promise.all(procs.map((p) => p.exited))).toEqual(procs.map(() => 0));
}

describe('groups across worker processes', () => {
  it('3 processes never run more than 2 jobs of a group at once, also while one is SIGKILLed and replaced', async () => {
    await setQueueGroups(db.pool, db.schema, 'gproc', { groupConcurrency: 2 });
    // 6 groups x 2 = 12 group slots, fewer than the processes' 24 slots: the limit binds.
    const groups = Array.from({ length: 6 }, (_, g) => `tenant-${g}`);
    await queue.enqueueMany(
      groups.flatMap((group) =>
        Array.from({ length: 60 }, () => ({ task: 'span', queue: 'gproc', group, payload: { ms: 200 }, maxAttempts: 5 })),
      ),
    );
    // A worker that finishes a job claims the freed group slot itself, so processes
    // started together can leave one of them with no job for a long time. The victim
    // starts first and takes 8 of the 12 group slots (alone it would need ~9 s for
    // the 360 jobs); the others start after it and share the 4 slots left.
    const victim = await spawn('gproc-victim', 'gproc');
    const victimRunning = async () => (await spansOf('gproc')).some((s) => s.worker === 'gproc-victim' && s.ended_at === null);
    await waitFor(victimRunning, 'the victim to run jobs');
    const procs = [...(await Promise.all(['a', 'b'].map((n) => spawn(`gproc-${n}`, 'gproc')))), victim];
    await waitFor(async () => (await spansOf('gproc')).some((s) => s.worker !== 'gproc-victim'), 'another process to run a job');
    await waitFor(victimRunning, 'the victim to hold running jobs');
    procs[2]!.child.kill('SIGKILL');
    await procs[2]!.exited;
    const killedAt = await serverNow();
    const replacement = await spawn('gproc-c', 'gproc');
    await waitFor(async () => (await completed('gproc')) === 360, 'all 360 jobs to complete', 60_000);

    const spans = await spansOf('gproc');
    for (const group of groups) {
      expect(
        maxOverlap(
          spans.filter((s) => s.group_key === group),
          'gproc-victim',
          killedAt,
        ),
        group,
      ).toBeLessThanOrEqual(2);
    }
    // The limit was reached (it held work back), and the victim's jobs were run again elsewhere.
    expect(
      Math.max(
        ...groups.map((g) =>
          maxOverlap(
            spans.filter((s) => s.group_key === g),
            'gproc-victim',
            killedAt,
          ),
        ),
      ),
    ).toBe(2);
    const { rows: rerun } = await db.pool.query(
      `SELECT count(*)::int AS n FROM (SELECT job_id FROM ${db.s}.spans GROUP BY job_id HAVING count(*) > 1) x`,
    );
    expect(rerun[0].n).toBeGreaterThan(0);
    await stopAll([procs[0]!, procs[1]!, replacement]);
  });

  it('3 processes hold a group limit with short jobs that fail once and retry (slots refilled beside the write)', async () => {
    // Every freed slot is claimed while the finished job's row still says 'processing':
    // the claim must count it out for its own worker only, and retries go back to pending.
    await setQueueGroups(db.pool, db.schema, 'gshort', { groupConcurrency: 2 });
    // 4 groups x 2 = 8 group slots against the processes' 24: the limit binds all along.
    const groups = Array.from({ length: 4 }, (_, g) => `short-${g}`);
    await queue.enqueueMany(
      groups.flatMap((group) =>
        Array.from({ length: 50 }, (_, i) => ({
          task: 'span',
          queue: 'gshort',
          group,
          payload: { ms: 3 + (i % 4), failFirst: i % 3 === 0 },
          maxAttempts: 3,
        })),
      ),
    );
    const procs = await Promise.all(['a', 'b', 'c'].map((n) => spawn(`gshort-${n}`, 'gshort', { BACKOFF_MS: '20' })));
    await waitFor(async () => (await completed('gshort')) === 200, 'all 200 jobs to complete', 60_000);
    await stopAll(procs);
    const spans = await spansOf('gshort');
    // 200 first attempts and a second one for each of the 68 that failed once.
    expect(spans).toHaveLength(268);
    const never = new Date(8.64e15);
    const overlaps = groups.map((g) =>
      maxOverlap(
        spans.filter((s) => s.group_key === g),
        '',
        never,
      ),
    );
    // Never over the limit, and the limit bound (some group ran 2 at once).
    expect(Math.max(...overlaps), `most runs at once per group: ${overlaps.join(', ')}`).toBeLessThanOrEqual(2);
    expect(Math.max(...overlaps)).toBe(2);
  });

  it('3 processes keep a queue rate limit: no 1-second window over limit + burst, also across a SIGKILL', async () => {
    await setQueueRateLimit(db.pool, db.schema, 'rproc', { limit: 10, intervalMs: 1000, burst: 2 });
    await queue.enqueueMany(Array.from({ length: 40 }, () => ({ task: 'span', queue: 'rproc', payload: { ms: 1 } })));
    const procs = await Promise.all(['a', 'b', 'victim'].map((n) => spawn(`rproc-${n}`, 'rproc')));
    await waitFor(async () => (await completed('rproc')) >= 10, 'the first jobs to complete');
    procs[2]!.child.kill('SIGKILL');
    await procs[2]!.exited;
    // A start is a claim (it spends a token), stamped started_at by the claim on the
    // server clock. The victim's unfinished jobs will be claimed again after the
    // rescue, which overwrites started_at: read their first claim now, before that.
    const { rows: lost } = await db.pool.query<{ started_at: Date }>(
      `SELECT started_at FROM ${db.s}.jobs WHERE queue = 'rproc' AND status = 'processing' AND locked_by = 'rproc-victim'`,
    );
    await waitFor(async () => (await completed('rproc')) === 40, 'all 40 jobs to complete', 60_000);

    const { rows: final } = await db.pool.query<{ started_at: Date }>(
      `SELECT started_at FROM ${db.s}.jobs WHERE queue = 'rproc'`,
    );
    const starts = [...lost, ...final].map((r) => r.started_at.getTime());
    expect(starts).toHaveLength(40 + lost.length);
    // Every window of one second that begins at a start holds at most 10 + 2 starts.
    for (const from of starts) expect(starts.filter((at) => at >= from && at < from + 1000).length).toBeLessThanOrEqual(12);
    await stopAll([procs[0]!, procs[1]!]);
  });
});
