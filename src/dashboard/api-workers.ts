import type { FastifyInstance, FastifyRequest } from 'fastify';
import { runScheduleNow } from '../admin/schedules.js';
import { listWorkers } from '../admin/workers.js';
import type { Queryable } from '../db/executor.js';
import { listSchedules } from '../maintenance/cron.js';
import { migrateStatements } from '../db/statements/migrate.js';
import { describeFailure, type DatabaseStatus, type LiveFeed } from './live.js';
import { iso } from './time.js';
import { actionInput } from './body.js';
import { isOutOfTime, timeLimit } from '../lifecycle/time-limit.js';
import { quoteSchema } from '../db/identifiers.js';
import { DatabaseError } from '../errors.js';

export interface WorkersApiContext {
  db: Queryable;
  schema: string;
  feed: LiveFeed;
  /** Who made the request, for the audit log. */
  actor: (req: FastifyRequest) => string;
  /** A round trip on the LISTEN connection (Notifier.check): it waits for no pool. */
  listenCheck: (timeoutMs: number) => Promise<void>;
}

/**
 * The workers and cron views' part of the JSON API, and the database status.
 * Registered in the scope of registerApi, whose error handler and CSRF guard
 * apply here too.
 */
export function registerWorkersApi(app: FastifyInstance, ctx: WorkersApiContext): void {
  const { db, schema, feed } = ctx;

  app.get('/api/workers', async (_req, reply) => {
    const workers = await listWorkers(db, schema);
    // The running jobs come as jsonb, their times as Postgres text: one format for every time.
    const out = workers.map((w) => ({ ...w, running: w.running.map((job) => ({ ...job, startedAt: iso(job.startedAt) })) }));
    return reply.header('cache-control', 'no-store').send({ workers: out });
  });

  app.get('/api/schedules', async (_req, reply) => {
    return reply.header('cache-control', 'no-store').send({ schedules: await listSchedules(db, schema) });
  });

  app.post('/api/schedules/:name/run', async (req, reply) => {
    const name = String((req.params as { name: string }).name);
    actionInput(req, [], 'run');
    const job = await runScheduleNow(db, schema, name, { actor: ctx.actor(req) });
    if (!job) return reply.code(404).send({ error: { code: 'NOT_FOUND', message: `no schedule named ${JSON.stringify(name)}` } });
    feed.changed(job.queue);
    return { job };
  });

  // Asked by the page when its own requests fail, and while it polls instead of
  // streaming: one cheap round trip says which of server and database is down.
  const { catalogProbe } = migrateStatements(schema);
  const jobsTable = `${quoteSchema(schema)}.jobs`;
  const probe = async (): Promise<void> => {
    const { rows } = await db.query(catalogProbe, [jobsTable]);
    if ((rows[0] as { migrated: boolean } | undefined)?.migrated !== true) {
      throw new DatabaseError(`relation ${jobsTable} does not exist: run sluice migrate`, '42P01');
    }
  };
  app.get('/api/status', async (_req, reply) => {
    let found: Omit<DatabaseStatus, 'since'>;
    // The probe waits for a pooled connection behind the pages' own requests: under a
    // burst of them it had no answer in time from a Postgres that was fine, and every
    // page said "database unreachable" (outside review 274). A round trip on the
    // LISTEN connection, which waits for no pool, says whether Postgres answers.
    const answers = ctx.listenCheck(STATUS_PROBE_LIMIT_MS).then(
      () => true,
      () => false,
    );
    try {
      // Bounded: on a silent network (no refusal, no reset) the probe waited about a
      // minute, and the page said "live" meanwhile (outside review 84).
      await timeLimit(probe(), STATUS_PROBE_LIMIT_MS, () => {}, 'status probe');
      found = { database: 'ok' };
    } catch (err) {
      found = isOutOfTime(err) && (await answers) ? { database: 'ok' } : describeFailure(err);
    }
    // The feed keeps when the current state began (and tells open streams of a change).
    return reply.header('cache-control', 'no-store').send(feed.observe(found));
  });
}

/** Longest wait for the status probe's round trip: a health check's budget, not a query's. */
const STATUS_PROBE_LIMIT_MS = 5_000;
