// Sluice as a benchmark system (see bench/systems/process.mjs): the built package
// (dist/, `npm run bench` builds it), at its defaults, as users run it.
import { migrate, Queue, Worker } from '../../dist/index.js';

export async function install({ url, schema }) {
  await migrate({ connectionString: url, schema });
}

export async function openClient({ url, schema }) {
  const queue = new Queue({ connectionString: url, schema });
  return {
    enqueue: (i) => queue.enqueue('noop', { i }),
    enqueueMany: (is) => queue.enqueueMany(is.map((i) => ({ task: 'noop', payload: { i } }))),
    close: () => queue.close(),
  };
}

export async function openWorker({ url, schema, concurrency, onStart, onCompleted }) {
  const worker = new Worker({
    connectionString: url,
    schema,
    concurrency,
    tasks: { noop: (payload) => onStart(payload.i) },
  });
  worker.on('error', (err) => process.stderr.write(`sluice worker error: ${err.message}\n`));
  // Emitted once the result is written.
  worker.on('job:complete', () => onCompleted());
  return {
    start: () => worker.start(),
    stop: () => worker.stop(),
    stats: () => worker.stats,
  };
}
