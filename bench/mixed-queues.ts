/**
 * Limited queues beside a busy unlimited one, in one worker (outside reviews 128, 130):
 * does each limited queue get starts while the unlimited backlog waits?
 *
 *   DATABASE_URL=postgres://... node --import tsx bench/mixed-queues.ts [one|three|long|empty] [seconds]
 *
 * - one (default): queues [G, P], concurrency 8, 50 ms jobs, 1,500 jobs each; G under
 *   a group limit (2, 3 groups), then a queue limit (6), then a rate limit (20/s,
 *   burst 2), P unlimited. Starts per second of each queue, second by second.
 * - three: queues [G1, G2, G3, P1], concurrency 4, 20 ms jobs; G1 group limit 1 (3
 *   groups), G2 queue limit 2, G3 rate limit 10/s, P1 unlimited with 20,000 jobs.
 *   Starts per second of each queue over the run.
 * - long: queues [G, P], concurrency 4; G under a queue limit of 1 with 50 ms jobs, P
 *   unlimited with 300 ms jobs (slots free one at a time). Starts of each over the run.
 * - empty: the cost of an empty queue beside a backlog of short jobs (outside reviews
 *   133, 134): 20,000 no-op jobs in P (BACKLOG=n for more), drained by a worker of [P],
 *   one of [G, P] with G under a queue limit of 2 and no job, and one of [X, P] with X
 *   unlimited and empty, concurrency 10. Jobs/s of each.
 * - idle-limited: a queue L limited to 7 with 50 ms jobs (at most 140 starts/s), drained
 *   by a worker (concurrency 20) of [L] alone, then of [L] and seven empty queues each
 *   under a limit of 3 (outside review 275: each limited queue a worker serves is one
 *   more statement in its claim rounds). L's starts/s in each.
 * Each run in a fresh schema, dropped after.
 */
import { migratedSchema, type ScratchSchema } from './lib/database.js';
import { Queue, Worker, setQueueGroups, setQueueRateLimit } from '../src/index.js';

const url = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const part = process.argv[2] ?? 'one';
const seconds = Number(process.argv[3] ?? (part === 'one' ? 8 : 10));

/** Runs a worker of `queues` for `seconds`; returns each queue's start times (ms since its start). */
async function run(
  db: ScratchSchema,
  queues: string[],
  concurrency: number,
  jobMs: number | ((queue: string) => number),
): Promise<Map<string, number[]>> {
  const starts = new Map<string, number[]>(queues.map((q) => [q, []]));
  const t0 = Date.now();
  const worker = new Worker({
    connectionString: url,
    schema: db.schema,
    queues,
    concurrency,
    tasks: {
      t: async (_p, { job }) => {
        starts.get(job.queue)!.push(Date.now() - t0);
        const ms = typeof jobMs === 'number' ? jobMs : jobMs(job.queue);
        if (ms > 0) await new Promise((r) => setTimeout(r, ms));
      },
    },
  });
  await worker.start();
  await new Promise((r) => setTimeout(r, seconds * 1000));
  await worker.stop();
  return starts;
}

/** Runs `body` with a fresh migrated schema and a Queue on it; drops the schema after. */
async function inSchema(label: string, body: (db: ScratchSchema, queue: Queue) => Promise<void>): Promise<void> {
  const db = await migratedSchema(url, label);
  const queue = new Queue({ connectionString: url, schema: db.schema });
  try {
    await body(db, queue);
  } finally {
    await queue.close();
    await db.drop();
  }
}

const perSecond = (times: number[]) =>
  Array.from({ length: seconds }, (_, s) => times.filter((t) => t >= s * 1000 && t < (s + 1) * 1000).length);

async function one(limit: 'group' | 'queue' | 'rate'): Promise<void> {
  await inSchema(`mixed_${limit}`, async (db, queue) => {
    if (limit === 'group') await setQueueGroups(db.pool, db.schema, 'G', { groupConcurrency: 2 });
    if (limit === 'queue') await queue.setQueueConcurrency('G', 6);
    if (limit === 'rate') await setQueueRateLimit(db.pool, db.schema, 'G', { limit: 20, burst: 2 });
    const group = (i: number) => (limit === 'group' ? { group: `g${i % 3}` } : {});
    await queue.enqueueMany(Array.from({ length: 1_500 }, (_, i) => ({ task: 't', queue: 'G', ...group(i) })));
    await queue.enqueueMany(Array.from({ length: 1_500 }, () => ({ task: 't', queue: 'P' })));
    const starts = await run(db, ['G', 'P'], 8, 50);
    console.log(
      `G under a ${limit} limit: G starts/s ${perSecond(starts.get('G')!).join(' ')} | P starts/s ${perSecond(starts.get('P')!).join(' ')}`,
    );
  });
}

async function three(): Promise<void> {
  await inSchema('mixed_three', async (db, queue) => {
    await setQueueGroups(db.pool, db.schema, 'G1', { groupConcurrency: 1 });
    await queue.setQueueConcurrency('G2', 2);
    await setQueueRateLimit(db.pool, db.schema, 'G3', { limit: 10 });
    await queue.enqueueMany(Array.from({ length: 1_500 }, (_, i) => ({ task: 't', queue: 'G1', group: `g${i % 3}` })));
    for (const q of ['G2', 'G3']) await queue.enqueueMany(Array.from({ length: 1_500 }, () => ({ task: 't', queue: q })));
    await queue.enqueueMany(Array.from({ length: 20_000 }, () => ({ task: 't', queue: 'P1' })));
    const starts = await run(db, ['G1', 'G2', 'G3', 'P1'], 4, 20);
    console.log([...starts].map(([q, times]) => `${q} ${(times.length / seconds).toFixed(1)}/s`).join(' | '));
  });
}

async function long(): Promise<void> {
  await inSchema('mixed_long', async (db, queue) => {
    await queue.setQueueConcurrency('G', 1);
    await queue.enqueueMany(Array.from({ length: 1_500 }, () => ({ task: 't', queue: 'G' })));
    await queue.enqueueMany(Array.from({ length: 5_000 }, () => ({ task: 't', queue: 'P' })));
    const starts = await run(db, ['G', 'P'], 4, (q) => (q === 'G' ? 50 : 300));
    console.log([...starts].map(([q, times]) => `${q} ${times.length} starts in ${seconds} s`).join(' | '));
  });
}

async function empty(): Promise<void> {
  const backlog = Number(process.env.BACKLOG ?? 20_000);
  for (const queues of [['P'], ['G', 'P'], ['X', 'P']]) {
    await inSchema('mixed_empty', async (db, queue) => {
      await queue.setQueueConcurrency('G', 2);
      for (let n = 0; n < backlog; n += 10_000) {
        await queue.enqueueMany(Array.from({ length: Math.min(10_000, backlog - n) }, () => ({ task: 't', queue: 'P' })));
      }
      const starts = await run(db, queues, 10, 0);
      const times = starts.get('P')!;
      const rate = times.length / ((times.at(-1)! - times[0]!) / 1000);
      console.log(`worker of [${queues.join(', ')}]: P ${times.length} jobs, ${rate.toFixed(0)} jobs/s`);
    });
  }
}

async function idleLimited(): Promise<void> {
  const empties = Array.from({ length: 7 }, (_, i) => `E${i}`);
  for (const queues of [['L'], ['L', ...empties]]) {
    await inSchema('mixed_idle', async (db, queue) => {
      await queue.setQueueConcurrency('L', 7);
      for (const e of empties) await queue.setQueueConcurrency(e, 3);
      await queue.enqueueMany(Array.from({ length: 3_000 }, () => ({ task: 't', queue: 'L' })));
      const starts = await run(db, queues, 20, 50);
      console.log(
        `worker of ${queues.length} limited queues: L ${(starts.get('L')!.length / seconds).toFixed(1)} starts/s (limit 7 x 50 ms: 140)`,
      );
    });
  }
}

if (part === 'three') await three();
else if (part === 'idle-limited') await idleLimited();
else if (part === 'empty') await empty();
else if (part === 'long') await long();
else for (const limit of ['group', 'queue', 'rate'] as const) await one(limit);
