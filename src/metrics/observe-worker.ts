import type { JobRow } from '../job.js';
import type { WorkerEmitter } from '../worker/events.js';
import type { SluiceMetrics } from './metrics.js';

/**
 * Feeds a worker's events into the metrics. Run time is measured from job:start
 * to its result event; jobs that end without a result (cancelled, snoozed, handed
 * back, lost) leave the running count with no run time observed.
 * Every series carries the worker's schema. The running and leader gauges move by
 * this worker's own changes, so the workers sharing one collector add up.
 * Returns a function that detaches it (and takes back what it added to them).
 */
export function observeWorker(worker: WorkerEmitter, schema: string, metrics: SluiceMetrics): () => void {
  const started = new Map<string, number>();
  let counted = 0;
  let leading = false;
  const labels = (job: JobRow) => ({ schema, queue: job.queue, task: job.task });
  const countRunning = () => {
    metrics.running.inc({ schema }, started.size - counted);
    counted = started.size;
  };
  const lead = (now: boolean) => {
    if (now !== leading) metrics.leader.inc({ schema }, now ? 1 : -1);
    leading = now;
  };
  const finish = (job: JobRow, outcome: 'completed' | 'failed') => {
    const at = started.get(job.id);
    started.delete(job.id);
    countRunning();
    if (at !== undefined) metrics.duration.observe({ ...labels(job), outcome }, (performance.now() - at) / 1_000);
  };
  const drop = (jobs: readonly JobRow[]) => {
    for (const job of jobs) started.delete(job.id);
    countRunning();
  };
  // Present from the start at 0: increase() sees the first prune, and the
  // gauges read 0 rather than nothing before the first job.
  metrics.pruned.inc({ schema, mode: 'removed' }, 0);
  metrics.running.inc({ schema }, 0);
  metrics.leader.inc({ schema }, 0);
  const listeners = {
    'jobs:claimed': (jobs: JobRow[]) => metrics.claimBatch.observe({ schema }, jobs.length),
    'job:start': (job: JobRow) => {
      started.set(job.id, performance.now());
      countRunning();
      metrics.wait.observe(labels(job), Math.max(0, Date.now() - job.run_at.getTime()) / 1_000);
    },
    'job:complete': (job: JobRow) => {
      metrics.completed.inc(labels(job));
      finish(job, 'completed');
    },
    'job:fail': (job: JobRow, info: { willRetry: boolean }) => {
      metrics.failed.inc({ ...labels(job), final: String(!info.willRetry) });
      finish(job, 'failed');
    },
    // Ended without a result to observe: no longer running (outside review 201: a
    // cancelled job stayed counted for the life of the process).
    'job:lock-lost': (job: JobRow) => drop([job]),
    'job:cancel': (job: JobRow) => drop([job]),
    'job:snooze': (job: JobRow) => drop([job]),
    'jobs:handed-back': (jobs: JobRow[]) => drop(jobs),
    'jobs:rescued': (jobs: { queue: string }[]) => jobs.forEach((j) => metrics.rescued.inc({ schema, queue: j.queue })),
    'jobs:pruned': (r: { removed: number }) => metrics.pruned.inc({ schema, mode: 'removed' }, r.removed),
    'leader:elected': () => lead(true),
    'leader:lost': () => lead(false),
  };
  for (const [event, listener] of Object.entries(listeners)) worker.on(event as 'leader:lost', listener as () => void);
  return () => {
    for (const [event, listener] of Object.entries(listeners)) worker.off(event as 'leader:lost', listener as () => void);
    started.clear();
    countRunning();
    lead(false);
  };
}
