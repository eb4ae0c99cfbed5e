import { errorFields, type Logger } from '../logger.js';
import type { JobRow } from '../job.js';
import type { HandBackReason, WorkerEmitter } from './events.js';

/**
 * Writes a worker's events to a structured logger: lifecycle, maintenance, cancels
 * and hand-backs at info, each job at debug, failures at warn, database trouble at error.
 * Returns a function that detaches it.
 */
export function logWorkerEvents(worker: WorkerEmitter, workerId: string, logger: Logger): () => void {
  const base = { worker: workerId };
  const job = (j: JobRow) => ({ ...base, jobId: j.id, queue: j.queue, task: j.task, attempt: j.attempts });
  const listeners = {
    'job:start': (j: JobRow) => logger.debug(job(j), 'job started'),
    'job:complete': (j: JobRow) => logger.debug(job(j), 'job completed'),
    'job:fail': (j: JobRow, info: { error: unknown; willRetry: boolean }) =>
      logger.warn(
        { ...job(j), willRetry: info.willRetry, err: errorFields(info.error) },
        info.willRetry ? 'job failed, will retry' : 'job failed',
      ),
    'job:lock-lost': (j: JobRow) => logger.warn(job(j), 'job lock lost; its result was dropped'),
    'job:cancel': (j: JobRow) => logger.info(job(j), 'job cancelled while it ran'),
    'job:snooze': (j: JobRow, info: { runAt: Date }) => logger.debug({ ...job(j), runAt: info.runAt }, 'job snoozed'),
    // 'overdue' (claimed ahead, no slot came within 0.5 s) is routine on a busy worker: debug.
    'jobs:handed-back': (jobs: JobRow[], info: { reason: HandBackReason }) =>
      logger[info.reason === 'overdue' ? 'debug' : 'info'](
        { ...base, count: jobs.length, reason: info.reason, jobIds: jobs.slice(0, 20).map((j) => j.id) },
        'jobs handed back to pending, attempts not spent',
      ),
    'jobs:rescued': (jobs: { id: string; status: string }[]) =>
      logger.info(
        { ...base, count: jobs.length, failed: jobs.filter((r) => r.status === 'failed').length },
        'rescued jobs with expired locks',
      ),
    'jobs:pruned': (r: { removed: number; archived: number; droppedPartitions: string[] }) =>
      logger.info({ ...base, ...r }, 'pruned finished jobs'),
    'leader:elected': () => logger.info(base, 'elected maintenance leader'),
    'leader:lost': () => logger.info(base, 'no longer maintenance leader'),
    error: (err: unknown) => logger.error({ ...base, err: errorFields(err) }, 'worker error'),
    reconnected: (r: { downMs: number }) => logger.info({ ...base, downMs: Math.round(r.downMs) }, 'reconnected to Postgres'),
  } as const;
  for (const [event, listener] of Object.entries(listeners)) worker.on(event as 'error', listener as (e: unknown) => void);
  return () => {
    for (const [event, listener] of Object.entries(listeners)) worker.off(event as 'error', listener as (e: unknown) => void);
  };
}
