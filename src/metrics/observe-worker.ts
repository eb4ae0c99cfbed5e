import type { JobRow } from '../job.js';
import type { WorkerEmitter } from '../worker/events.js';
import type { SluiceMetrics } from './metrics.js';

/**
 * Feeds a worker's events into the metrics. Run time is measured from job:start
 * to its result event; jobs that end without a result (cancelled, snoozed, handed
 * back, lost) leave the running count with no run time observed.
 * Returns a function that detaches it.
 */
export function observeWorker(worker: WorkerEmitter, metrics: SluiceMetrics): () => void {
  const started = new Map<string, number>();
  const labels = (job: JobRow) => ({ queue: job.queue, task: job.task });
  const finish = (job: JobRow, outcome: 'completed' | 'failed') => {
    const at = started.get(job.id);
    started.delete(job.id);
    metrics.running.set(started.size);
    if (at !== undefined) metrics.duration.observe({ ...labels(job), outcome }, (performance.now() - at) / 1_000);
  };
  const drop = (jobs: readonly JobRow[]) => {
    for (const job of jobs) started.delete(job.id);
    metrics.running.set(started.size);
  };
  const listeners = {
    'jobs:claimed': (jobs: JobRow[]) => metrics.claimBatch.observe(jobs.length),
    'job:start': (job: JobRow) => {
      started.set(job.id, performance.now());
      metrics.running.set(started.size);
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
    'jobs:rescued': (jobs: { queue: string }[]) => jobs.forEach((j) => metrics.rescued.inc({ queue: j.queue })),
    'jobs:pruned': (r: { removed: number }) => metrics.pruned.inc({ mode: 'removed' }, r.removed),
    'leader:elected': () => metrics.leader.set(1),
    'leader:lost': () => metrics.leader.set(0),
  };
  for (const [event, listener] of Object.entries(listeners)) worker.on(event as 'leader:lost', listener as () => void);
  return () => {
    for (const [event, listener] of Object.entries(listeners)) worker.off(event as 'leader:lost', listener as () => void);
  };
}
