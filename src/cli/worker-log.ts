import type { Worker } from '../worker/worker.js';
import type { JobRow } from '../job.js';
import type { Logger } from '../logger.js';
import { ErrorLines } from './error-lines.js';
import { describeError } from '../worker/run.js';
import { firstLine, jsonText, printable, terminalText } from './output.js';

type Fields = Record<string, string | number | boolean | null>;

/** The logger's messages for events that follow() prints itself. */
const FOLLOWED = new Set(['worker error', 'rescued jobs with expired locks', 'reconnected to Postgres']);

/**
 * One line per job outcome (and per worker lifecycle step), either compact text
 *   2026-01-31T09:00:00.000Z completed send_welcome #42 queue=default attempt=1 12ms
 * or JSON lines ({"time", "event", ...}) for log shippers.
 */
export class WorkerLog {
  private readonly errors = new ErrorLines();

  constructor(private readonly json: boolean) {}

  /** Logs every job outcome of the worker. */
  follow(worker: Worker): void {
    worker.on('job:complete', (job, { durationMs }) => this.job('completed', job, durationMs));
    worker.on('job:fail', (job, { error, willRetry, durationMs }) =>
      this.job(willRetry ? 'retrying' : 'failed', job, durationMs, { error: errorText(error) }),
    );
    worker.on('job:cancel', (job) => this.job('cancelled', job, null));
    worker.on('job:snooze', (job, { runAt }) => this.job('snoozed', job, null, { until: runAt.toISOString() }));
    worker.on('job:lock-lost', (job) => this.job('lock-lost', job, null));
    worker.on('jobs:rescued', (jobs) => this.line('rescued', { count: jobs.length }));
    // At a stop: which jobs went back to pending unfinished (outside review 97: the log did not say).
    // And a running job given back because another session held its row past the renewal
    // timeout, because Postgres restarted under it, or did not answer its heartbeats.
    worker.on('jobs:handed-back', (jobs, { reason }) => {
      if (reason === 'stopping' || reason === 'row-held' || reason === 'restart' || reason === 'unanswered') {
        this.line('handed-back', { count: jobs.length, ids: jobs.map((j) => j.id).join(','), reason });
      }
    });
    worker.on('error', (err) => {
      const line = this.errors.next(err.message);
      if (line) this.line('error', { error: err.message, ...(line.repeated > 0 && line) }, process.stderr);
    });
    worker.on('reconnected', ({ downMs }) => {
      this.errors.wentThrough();
      this.line('reconnected', { after: `${Math.round(downMs)}ms` });
    });
  }

  /**
   * The Worker's `logger`: its warnings and errors (the maintenance leader's
   * "due jobs ... wait: no live worker handles the task") as lines of this log,
   * on stderr; info only when `verbose`, debug never. Job outcomes and 'error'
   * events, which follow() already prints, are left out so nothing shows twice.
   */
  logger(verbose = false): Logger {
    const write = (level: string, fields: object, message?: string) => {
      const f = fields as Record<string, unknown>;
      if ('jobId' in f || (message !== undefined && FOLLOWED.has(message))) return;
      const out: Fields = message ? { message } : {};
      for (const [k, v] of Object.entries(f)) {
        if (k === 'err' && v && typeof v === 'object' && 'message' in v) out.error = String(v.message);
        // In text the message says it all (queue, task, counts); JSON lines keep every field.
        else if ((this.json || !message) && (v === null || ['string', 'number', 'boolean'].includes(typeof v)))
          out[k] = v as Fields[string];
      }
      this.line(level, out, level === 'info' ? process.stdout : process.stderr);
    };
    return {
      debug: () => {},
      info: (fields, message) => {
        if (verbose) write('info', fields, message);
      },
      warn: (fields, message) => write('warn', fields, message),
      error: (fields, message) => write('error', fields, message),
    };
  }

  /** stdout's reader went away: what was meant for it goes to stderr, the one channel left (outside review 199). */
  stdoutClosed = false;

  line(event: string, fields: Fields = {}, to: NodeJS.WritableStream = process.stdout): void {
    const out = this.stdoutClosed && to === process.stdout ? process.stderr : to;
    const time = new Date().toISOString();
    if (this.json) {
      out.write(`${jsonText({ time, event, ...fields })}\n`);
      return;
    }
    const text = Object.entries(fields)
      .map(([k, v]) => {
        // An 'error' line's error is its text: "error error: worker: ..." said it twice (outside review 97).
        const said =
          k === 'job' || k === 'message' || (k === 'error' && event === 'error')
            ? v
            : k === 'error'
              ? `error: ${v}`
              : `${k}=${v}`;
        // A task name or an error message with a line break or escape codes forged lines
        // of its own or cleared the terminal (outside reviews 265 and 266). A stack keeps
        // its lines, each indented, so none reads as a line of the log.
        return k === 'stack' ? terminalText(String(said)).replace(/\n(?![ \t])/g, '\n    ') : terminalText(String(said), false);
      })
      .join(' ');
    out.write(`${time} ${event}${text ? ` ${text}` : ''}\n`);
  }

  /** Names for a line, comma-separated: escaped in text lines, where a line break in one forged a line (outside review 252). */
  names(names: readonly string[]): string {
    return (this.json ? names : names.map(printable)).join(',');
  }

  private job(event: string, job: JobRow, durationMs: number | null, extra: Fields = {}): void {
    const ms = durationMs === null ? null : Math.round(durationMs);
    const fields: Fields = this.json
      ? { id: job.id, task: job.task, queue: job.queue, attempt: job.attempts, durationMs: ms, ...extra }
      : {
          // Quoted and escaped as the CLI's lists show names: a line break in a task
          // name forged a log line of its own (outside review 252).
          job: `${printable(job.task)} #${job.id}`,
          queue: printable(job.queue),
          attempt: job.attempts,
          ...(ms === null ? {} : { took: `${ms}ms` }),
          ...extra,
        };
    this.line(event, fields);
  }
}

function errorText(error: unknown): string {
  // A thrown object said as last_error says it, not "[object Object]" (outside review 126).
  return firstLine(error instanceof Error ? error.message : describeError(error), 200);
}
