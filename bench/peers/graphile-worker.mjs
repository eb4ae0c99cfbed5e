// graphile-worker as a benchmark system (see bench/systems/process.mjs), run with
// the Node 22 of this folder. Variants:
//   default: `concurrency` and nothing else (each worker asks the database for its
//            next job, and completes each job with its own statement);
//   batched: the batching its docs describe for throughput: a local queue of 500
//            jobs fetched by the pool, and completions and failures batched
//            (completeJobBatchDelay / failJobBatchDelay 0: whatever finished in the
//            same tick shares one statement, without a timed wait).
import { EventEmitter } from 'node:events';
import { Logger, makeWorkerUtils, run, runMigrations } from 'graphile-worker';

// Info lines ("Completed task ...") cost the worker time; keep warnings and errors.
const logger = new Logger(() => (level, message) => {
  if (level === 'error' || level === 'warning') process.stderr.write(`graphile-worker ${level}: ${message}\n`);
});

const PRESETS = {
  default: {},
  batched: { worker: { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } },
};

export async function install({ url, schema }) {
  await runMigrations({ connectionString: url, schema, logger });
}

export async function openClient({ url, schema }) {
  const utils = await makeWorkerUtils({ connectionString: url, schema, logger });
  return {
    enqueue: (i) => utils.addJob('noop', { i }),
    enqueueMany: (is) => utils.addJobs(is.map((i) => ({ identifier: 'noop', payload: { i } }))),
    close: () => utils.release(),
  };
}

export async function openWorker({ url, schema, variant, concurrency, onStart, onCompleted }) {
  const preset = PRESETS[variant];
  if (!preset) throw new Error(`graphile-worker: unknown variant ${variant}`);
  let runner = null;
  const events = new EventEmitter();
  // Fires once the completion was handed to the completer (with batching, possibly
  // before it is written: the benchmark checks the table for that).
  events.on('job:complete', ({ error }) => {
    if (!error) onCompleted();
  });
  return {
    async start() {
      runner = await run({
        connectionString: url,
        schema,
        concurrency,
        noHandleSignals: true,
        logger,
        events,
        preset,
        taskList: { noop: async (payload) => void onStart(payload.i) },
      });
    },
    stop: async () => runner?.stop(),
  };
}
