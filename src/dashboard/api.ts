import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import {
  allowedActions,
  cancelJob,
  checkStatus,
  deleteJob,
  getJob,
  getJobAudit,
  jobId,
  listJobs,
  retryJob,
  runJobNow,
  type JobActionResult,
} from '../admin/jobs.js';
import { cancelJobs, retryFailed } from '../admin/bulk.js';
import { searchJobs } from '../admin/search.js';
import { setQueuePaused } from '../control.js';
import { controlStatements } from '../db/statements/control.js';
import type { Queryable } from '../db/executor.js';
import { DatabaseError, isConnectionFailure, NotSentError, SluiceError, ValidationError } from '../errors.js';
import { parseIsoDateTime } from '../iso-date-time.js';
import type { UnfinishedStatus } from '../job.js';
import { checks } from '../validate.js';
import { attemptsOf } from './attempts.js';
import { actionInput } from './body.js';
import { createFlag, forKnownQueue, requireKnownQueue, UnknownQueueError } from './known-queue.js';
import type { HealthReports } from './health.js';
import type { LiveFeed } from './live.js';
import type { Overview } from './overview.js';
import { refuseUnknownQuery, requestError } from './request-errors.js';

const { checkName } = checks(ValidationError);

/**
 * Over this many characters of JSON, a list row leaves the payload out (the job's
 * own page shows it whole): the list shows no payload, and 50 jobs of 1 MiB
 * payloads made a 51 MB page, 1,000 a response over the longest string V8 makes
 * (outside review 162). Left out by Postgres, so such rows are never read whole.
 */
const LISTED_PAYLOAD_CHARS = 4_096;

export interface ApiContext {
  db: Queryable;
  health: HealthReports;
  /** Who made the request, for the audit log. */
  actor: (req: FastifyRequest) => string;
  schema: string;
  feed: LiveFeed;
  loadOverview: (db: Queryable, schema: string) => Promise<Overview>;
}

/** Query string of GET api/jobs. Every filter is optional; one value each. */
/** The filters GET api/jobs takes. */
const JOBS_FILTERS = new Set(['status', 'queue', 'task', 'before', 'after', 'limit', 'from', 'until', 'field', 'value']);
const NO_PARAMETERS: ReadonlySet<string> = new Set();

interface JobsQuery {
  status?: string;
  queue?: string;
  task?: string;
  before?: string;
  after?: string;
  limit?: string;
  /** ISO 8601 times: jobs created in [from, until). */
  from?: string;
  until?: string;
  /** A payload field (dotted path) and its value: a search (with status, queue, task, before, limit). */
  field?: string;
  value?: string;
}

const UNDEFINED_TABLE = '42P01';

const HTTP_STATUS: Partial<Record<SluiceError['code'], number>> = {
  VALIDATION: 400,
  CONFIG: 400,
};

const MAYBE_APPLIED = ' (the change may have been made before the connection failed: check before sending it again)';

/**
 * The JSON API the page uses. Reads are GET; every change is a POST with a JSON
 * body (the CSRF guard runs before any of these). All work goes through the
 * admin API (src/admin), the same functions `sluice jobs` uses.
 */
export function registerApi(app: FastifyInstance, ctx: ApiContext): void {
  const { db, schema, feed } = ctx;

  app.setErrorHandler((err: FastifyError | SluiceError, req, reply) => {
    if (err instanceof UnknownQueueError) {
      return reply.code(404).send({ error: { code: 'NOT_FOUND', message: err.message, queue: err.queue } });
    }
    if (err instanceof DatabaseError && err.sqlState === UNDEFINED_TABLE) {
      const message = `no Sluice tables in schema ${JSON.stringify(schema)}: run \`sluice migrate\` (or pick the schema with --schema)`;
      return reply.code(503).send({ error: { code: 'NOT_MIGRATED', message } });
    }
    // A change whose statement was sent may have committed before the connection failed:
    // "failed" read as nothing done, and 50 jobs were cancelled (outside review 274).
    const connection = (message: string) => ({
      error: {
        code: 'CONNECTION',
        message: req.method === 'POST' && !(err instanceof NotSentError) ? `${message}${MAYBE_APPLIED}` : message,
      },
    });
    if (err instanceof SluiceError) {
      if (err.code === 'CONNECTION') return reply.code(503).send(connection(err.message));
      const status = HTTP_STATUS[err.code] ?? 500;
      return reply.code(status).send({ error: { code: err.code, message: err.message } });
    }
    // A database that cannot be reached is a 503 on every route (api/health gave a 500, outside review 83).
    if (isConnectionFailure(err)) return reply.code(503).send(connection(err.message));
    const { status, code, message } = requestError(err);
    return reply.code(status).send({ error: { code, message } });
  });

  app.get('/api/overview', async (_req, reply) => {
    return reply.header('cache-control', 'no-store').send(await ctx.loadOverview(db, schema));
  });

  app.get('/api/health', async (_req, reply) => {
    return reply.header('cache-control', 'no-store').send(await ctx.health.get());
  });

  app.get('/api/jobs', async (req) => {
    const q = req.query as JobsQuery;
    refuseUnknownQuery(q, JOBS_FILTERS);
    // A value only with its field, and a field only with its value: ?field=&value=1
    // listed every job (outside review 125), and a field with its box left empty
    // searched for "" and listed nothing (243), both without a word. Both empty is the
    // form sent with neither box filled: no filter (outside review 265).
    if (q.value && !q.field) throw new ValidationError('value: give the payload field to search (field=...)');
    if (q.field && !q.value) throw new ValidationError('field: give the value it should equal (value=...)');
    if (q.field) return searchByField(q);
    return listJobs(db, schema, {
      status: q.status ? checkStatus(q.status) : undefined,
      queue: q.queue || undefined,
      task: q.task || undefined,
      before: q.before || undefined,
      after: q.after || undefined,
      limit: q.limit ? integer('limit', q.limit) : undefined,
      createdFrom: q.from ? date('from', q.from) : undefined,
      createdUntil: q.until ? date('until', q.until) : undefined,
      maxPayloadChars: LISTED_PAYLOAD_CHARS,
    });
  });

  app.get('/api/jobs/:id', async (req, reply) => {
    // As api/jobs: a parameter it does not take is a 400, not ignored (outside review 265).
    refuseUnknownQuery(req.query as object, NO_PARAMETERS, 'parameter');
    const id = jobId(param(req.params, 'id'));
    const [job, audit, actions] = await Promise.all([
      getJob(db, schema, id),
      getJobAudit(db, schema, id),
      allowedActions(db, schema, id),
    ]);
    if (!job) return reply.code(404).send({ error: { code: 'NOT_FOUND', message: 'no such job' }, audit });
    // The actions the admin API would accept now; run-now only where it changes
    // something, a job waiting for a later time (the page's "Run now"): for one already
    // due it was listed and not offered (outside review 265).
    const runNow = job.status === 'pending' && job.run_at.getTime() > Date.now();
    return { job, audit, actions: runNow ? [...actions, 'run-now'] : actions, attempts: attemptsOf(job) };
  });

  const searchByField = (q: JobsQuery) => {
    if (q.from || q.until || q.after) throw new ValidationError('a payload search takes status, queue, task, before and limit');
    return searchJobs(db, schema, {
      field: q.field!,
      value: q.value!,
      status: q.status ? checkStatus(q.status) : undefined,
      queue: q.queue || undefined,
      task: q.task || undefined,
      before: q.before || undefined,
      limit: q.limit ? integer('limit', q.limit) : undefined,
      maxPayloadChars: LISTED_PAYLOAD_CHARS,
    });
  };

  const actions = { retry: retryJob, cancel: cancelJob, delete: deleteJob, 'run-now': runJobNow } as const;
  for (const [name, action] of Object.entries(actions)) {
    app.post(`/api/jobs/:id/${name}`, async (req, reply) => {
      actionInput(req, [], name);
      const id = jobId(param(req.params, 'id'));
      const result = await action(db, schema, id, { actor: ctx.actor(req) });
      return sendActionResult(reply, result, name, id, feed);
    });
  }

  const control = controlStatements(schema);
  for (const [name, paused] of [
    ['pause', true],
    ['resume', false],
  ] as const) {
    app.post(`/api/queues/:queue/${name}`, async (req) => {
      const queue = param(req.params, 'queue');
      // Like `sluice queues pause`: a typo must not create a paused queue; {"create": true} does it on purpose.
      const guarded = forKnownQueue(db, schema, queue, createFlag(actionInput(req, ['create'], name)));
      const settings = await setQueuePaused(guarded, control, queue, paused, { actor: ctx.actor(req) });
      feed.changed(queue);
      return { queue: settings };
    });
  }

  app.post('/api/jobs/retry-failed', async (req) => {
    // Every failed job of every queue only when asked for with {}: a request whose body
    // was forgotten retried them all (outside review 163).
    if (req.body === undefined) {
      throw new ValidationError('retry-failed: send a JSON body: {"queue": "name"} for one queue, or {} for every queue');
    }
    const body = actionInput(req, ['queue'], 'retry-failed') as { queue?: unknown };
    if (body.queue !== undefined && typeof body.queue !== 'string') throw new ValidationError('queue must be a string');
    // As `sluice jobs retry --failed --queue`: a misspelt queue retried nothing with a 200 (outside review 162).
    // An empty name is a 400, as in the admin API, not an unknown queue (outside review 169).
    if (body.queue !== undefined) await requireKnownQueue(db, schema, checkName('queue', body.queue));
    const filter = body.queue === undefined ? {} : { queue: body.queue };
    const result = await retryFailed(db, schema, { ...filter, actor: ctx.actor(req) });
    feed.changed(body.queue ?? '');
    return result;
  });

  // As `sluice jobs cancel --queue/--task`: one statement (no job it cancels is claimed
  // after it), and never every job of the schema: a queue or a task is required.
  app.post('/api/jobs/cancel', async (req) => {
    const body = actionInput(req, ['queue', 'task', 'statuses'], 'cancel') as Record<string, unknown>;
    for (const name of ['queue', 'task'] as const) {
      if (body[name] !== undefined && typeof body[name] !== 'string') throw new ValidationError(`${name} must be a string`);
    }
    const queue = body.queue as string | undefined;
    const task = body.task as string | undefined;
    if (queue !== undefined) await requireKnownQueue(db, schema, checkName('queue', queue));
    const result = await cancelJobs(db, schema, {
      ...(queue === undefined ? {} : { queue }),
      ...(task === undefined ? {} : { task }),
      ...(body.statuses === undefined ? {} : { statuses: body.statuses as UnfinishedStatus[] }),
      actor: ctx.actor(req),
    });
    feed.changed(queue ?? '');
    return result;
  });
}

function sendActionResult(reply: FastifyReply, result: JobActionResult, action: string, id: string, feed: LiveFeed) {
  if (result.ok) {
    feed.changed(result.job.queue);
    return reply.send({ job: result.job });
  }
  if (result.reason === 'not_found') return reply.code(404).send({ error: { code: 'NOT_FOUND', message: 'no such job' } });
  // Not "cannot retry a job that is cancelled", which cancelled jobs can be (outside review 201).
  if (result.archived) {
    const message = `cannot ${action} job ${id}: it is archived (${result.status}, moved to the history by the pruner) and read-only`;
    return reply.code(409).send({ error: { code: 'WRONG_STATUS', message, status: result.status, archived: true } });
  }
  return reply.code(409).send({
    error: { code: 'WRONG_STATUS', message: `cannot ${action} a job that is ${result.status}`, status: result.status },
  });
}

function param(params: unknown, name: string): string {
  return String((params as Record<string, unknown>)[name]);
}

function integer(name: string, text: string): number {
  if (!/^\d{1,9}$/.test(text)) throw new ValidationError(`${name} must be a positive integer, got ${JSON.stringify(text)}`);
  return Number(text);
}

function date(name: string, text: unknown): Date {
  // A name given twice arrives as an array (a 500 from text.trim, outside review 84).
  if (typeof text !== 'string') throw new ValidationError(`${name} must be given once`);
  return parseIsoDateTime(text, (problem) => {
    throw new ValidationError(`${name} ${problem}, got ${JSON.stringify(text)}`);
  });
}
