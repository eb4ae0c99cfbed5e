// Sluice as a benchmark system (see bench/systems/process.mjs): the built package
// at its defaults, as users run it. BENCH_SLUICE_DIST: the run's private copy of
// dist/ (bench/lib/sluice-build.ts); dist/ itself otherwise.
const { migrate, Queue, Worker } = await import(process.env.BENCH_SLUICE_DIST ?? new URL('../../dist/index.js', import.meta.url).href);

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
    ...(process.env.SLUICE_BENCH_WAKE_COOLDOWN_MS ? { wakeCooldownMs: Number(process.env.SLUICE_BENCH_WAKE_COOLDOWN_MS) } : {}),
    // SLUICE_BENCH_COMPLETED_JOBS=delete: completed rows deleted at completion, not kept (a non-default setting).
    // SLUICE_BENCH_BATCH_SIZE: a batchSize other than the default, to compare settings.
    ...(process.env.SLUICE_BENCH_BATCH_SIZE ? { batchSize: Number(process.env.SLUICE_BENCH_BATCH_SIZE) } : {}),
    ...(process.env.SLUICE_BENCH_COMPLETED_JOBS ? { completedJobs: process.env.SLUICE_BENCH_COMPLETED_JOBS } : {}),
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
