import type { Worker } from '../worker/worker.js';
import type { JobRow } from '../job.js';
import { firstLine } from './output.js';

type Fields = Record<string, string | number | boolean | null>;

/**
 * One line per job outcome (and per worker lifecycle step), either compact text
 *   2026-01-31T09:00:00.000Z completed send_welcome #42 queue=default attempt=1 12ms
 * or JSON lines ({"time", "event", ...}) for log shippers.
 */
export class WorkerLog {
  private readonly startedAt = new Map<string, number>();

  constructor(private readonly json: boolean) {}

  /** Logs every job event of the worker. */
  follow(worker: Worker): void {
    worker.on('job:start', (job) => this.startedAt.set(job.id, performance.now()));
    worker.on('job:complete', (job) => this.job('completed', job));
    worker.on('job:fail', (job, { error, willRetry }) =>
      this.job(willRetry ? 'retrying' : 'failed', job, { error: firstLine(error instanceof Error ? error.message : String(error), 200) }));
    worker.on('job:lock-lost', (job) => this.job('lock-lost', job));
    worker.on('jobs:rescued', (jobs) => this.line('rescued', { count: jobs.length }));
    worker.on('error', (err) => this.line('error', { error: err.message }, process.stderr));
  }

  line(event: string, fields: Fields = {}, out: NodeJS.WritableStream = process.stdout): void {
    const time = new Date().toISOString();
    if (this.json) {
      out.write(`${JSON.stringify({ time, event, ...fields })}\n`);
      return;
    }
    const text = Object.entries(fields)
      .map(([k, v]) => (k === 'job' ? v : k === 'error' ? `error: ${v}` : `${k}=${v}`))
      .join(' ');
    out.write(`${time} ${event}${text ? ` ${text}` : ''}\n`);
  }

  private job(event: string, job: JobRow, extra: Fields = {}): void {
    const started = this.startedAt.get(job.id);
    this.startedAt.delete(job.id);
    const ms = started === undefined ? null : Math.round(performance.now() - started);
    const fields: Fields = this.json
      ? { id: job.id, task: job.task, queue: job.queue, attempt: job.attempts, durationMs: ms, ...extra }
      : { job: `${job.task} #${job.id}`, queue: job.queue, attempt: job.attempts, ...(ms === null ? {} : { took: `${ms}ms` }), ...extra };
    this.line(event, fields);
  }
}
