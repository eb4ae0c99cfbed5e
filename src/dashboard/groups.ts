import { actionInput } from './body.js';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { getGroupStats } from '../admin/groups.js';
import type { Queryable } from '../db/executor.js';
import { ValidationError } from '../errors.js';
import { refuseUnknownQuery } from './request-errors.js';
import { createFlag, forKnownQueue, requireKnownQueue } from './known-queue.js';
import {
  listGroupSettings,
  listQueueLimits,
  resolveRateLimit,
  setGroupSettings,
  setQueueGroups,
  setQueueRateLimit,
  type GroupOptions,
  type QueueGroupOptions,
  type QueueLimits,
  type RateLimit,
} from '../groups/settings.js';

export interface GroupsApiContext {
  db: Queryable;
  schema: string;
  /** Who made the request, for the audit log. */
  actor: (req: FastifyRequest) => string;
}

/**
 * The groups part of the JSON API, which the page's groups view
 * (web/assets/views/groups.js) reads and whose forms write: every queue's group
 * and rate limits, one queue's groups (busiest first, with their own settings),
 * and changing them at run time. Registered in the scope of
 * registerApi, whose error handler (a ValidationError is a 400) and CSRF guard
 * apply here too.
 */
/** What GET api/queues/:queue/groups takes. */
const GROUPS_QUERY: ReadonlySet<string> = new Set(['top']);

export function registerGroupsApi(app: FastifyInstance, ctx: GroupsApiContext): void {
  const { db, schema } = ctx;

  app.get('/api/limits', async (_req, reply) => {
    return reply.header('cache-control', 'no-store').send({ queues: await listQueueLimits(db, schema) });
  });

  app.get('/api/queues/:queue/groups', async (req, reply) => {
    const queue = String((req.params as { queue: string }).queue);
    refuseUnknownQuery(req.query as object, GROUPS_QUERY, 'parameter');
    const top = (req.query as { top?: string }).top;
    // Only digits become a number: getGroupStats then quotes what was given ("abc", "1e3"), not NaN (review 62).
    const limit = top !== undefined && /^\d{1,9}$/.test(top) ? Number(top) : (top as unknown as number | undefined);
    const stats = await getGroupStats(db, schema, queue, limit === undefined ? {} : { limit }).catch((err: unknown) => {
      // The library's option is `limit`; here it is the ?top= parameter.
      if (err instanceof ValidationError && /^limit\b/.test(err.message)) {
        throw new ValidationError(err.message.replace(/^limit\b/, '?top='), { cause: err });
      }
      throw err;
    });
    // After the read, which checks the name (a 400): a queue never seen is a 404, as its changes are (outside review 193).
    if (stats.groups === 0) await requireKnownQueue(db, schema, queue);
    const settings = await listGroupSettings(db, schema, queue);
    return reply.header('cache-control', 'no-store').send({ ...stats, settings });
  });

  // Body: { groupConcurrency?, groupRateLimit?, rateLimit?, create? }; null removes a limit. 404 for an unknown queue without create.
  // Only what the body names changes: group defaults mark the queue grouped (as setQueueGroups does), a rate
  // limit alone does not (as `sluice queues rate`), so it keeps being claimed in order.
  app.post('/api/queues/:queue/limits', async (req) => {
    const queue = String((req.params as { queue: string }).queue);
    // Known names: setQueueGroups refuses an unknown group default itself.
    const input = actionInput(req, ['create', 'rateLimit', 'groupConcurrency', 'groupRateLimit'], 'limits');
    const { create, rateLimit, ...groupDefaults } = input as QueueGroupOptions & {
      rateLimit?: RateLimit | null;
      create?: unknown;
    };
    const setsGroups = Object.keys(groupDefaults).length > 0;
    if (rateLimit === undefined && !setsGroups) {
      throw new ValidationError('give groupConcurrency, groupRateLimit or rateLimit (null removes one)');
    }
    // Two statements: the rate limit is checked before the first, so a bad one cannot leave new group defaults
    // behind (setQueueGroups checks its own options before it writes).
    if (rateLimit !== undefined) resolveRateLimit('rate limit', rateLimit);
    const actor = { actor: ctx.actor(req) };
    // Like the CLI: no settings for a queue nobody uses (a typo) unless {"create": true}.
    const guarded = forKnownQueue(db, schema, queue, createFlag({ create }));
    let limits: QueueLimits | undefined;
    if (setsGroups) limits = await setQueueGroups(guarded, schema, queue, groupDefaults, actor);
    if (rateLimit !== undefined) limits = await setQueueRateLimit(guarded, schema, queue, rateLimit, actor);
    return { queue: limits };
  });

  // Body: { group: string | null, weight?, concurrencyLimit?, rateLimit?, create? }. 404 for an unknown queue without create.
  app.post('/api/queues/:queue/groups', async (req) => {
    const queue = String((req.params as { queue: string }).queue);
    const input = actionInput(req, ['group', 'create', 'weight', 'concurrencyLimit', 'rateLimit'], 'groups');
    const { group, create, ...settings } = input as GroupOptions & { group?: string | null; create?: unknown };
    if (group === undefined) throw new ValidationError('group: give the group key, or null for the jobs without one');
    const guarded = forKnownQueue(db, schema, queue, createFlag({ create }));
    return { group: await setGroupSettings(guarded, schema, queue, group, settings, { actor: ctx.actor(req) }) };
  });
}
