// pg-boss as a benchmark system (see bench/systems/process.mjs), run with the
// Node 22 of this folder. `concurrency` is `localConcurrency` (that many fetch
// loops). Variants:
//   default: nothing else (each loop fetches one job, runs it, completes it, then
//            waits out the 2 s polling interval before its next fetch);
//   batched: the settings for throughput: batchSize 500 per fetch, burstWhenBatchFull
//            (fetch again at once while fetches come back full), the shortest
//            polling interval (0.5 s), and NOTIFY on the queue (useListenNotify) so
//            idle workers wake on a new job instead of at their next poll.
import { PgBoss } from 'pg-boss';

const QUEUE = 'noop';
const VARIANTS = {
  default: { boss: {}, queue: {}, work: {} },
  batched: {
    boss: { useListenNotify: true },
    queue: { notify: true },
    work: { batchSize: 500, burstWhenBatchFull: true, pollingIntervalSeconds: 0.5 },
  },
};

function variantOf(name) {
  const v = VARIANTS[name];
  if (!v) throw new Error(`pg-boss: unknown variant ${name}`);
  return v;
}

async function startBoss(url, schema, variant) {
  const boss = new PgBoss({ connectionString: url, schema, ...variantOf(variant).boss });
  boss.on('error', (err) => process.stderr.write(`pg-boss error: ${err.message}\n`));
  await boss.start();
  return boss;
}

export async function install({ url, schema, variant }) {
  const boss = await startBoss(url, schema, variant);
  try {
    await boss.createQueue(QUEUE, variantOf(variant).queue);
  } finally {
    await boss.stop({ graceful: false });
  }
}

export async function openClient({ url, schema, variant }) {
  const boss = await startBoss(url, schema, variant);
  return {
    enqueue: (i) => boss.send(QUEUE, { i }),
    enqueueMany: (is) => boss.insert(QUEUE, is.map((i) => ({ data: { i } }))),
    close: () => boss.stop({ graceful: false }),
  };
}

export async function openWorker({ url, schema, variant, concurrency, onStart, onCompleted }) {
  let boss = null;
  return {
    async start() {
      boss = await startBoss(url, schema, variant);
      await boss.work(QUEUE, { localConcurrency: concurrency, ...variantOf(variant).work }, async (jobs) => {
        for (const job of jobs) onStart(job.data.i);
        // pg-boss completes the batch after this returns: the benchmark checks the
        // table for the completions being written.
        onCompleted(jobs.length);
      });
    },
    stop: async () => boss?.stop({ graceful: true }),
  };
}
