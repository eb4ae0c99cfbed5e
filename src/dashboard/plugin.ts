import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { channelFor } from '../db/identifiers.js';
import { openDriver } from '../db/drivers/open.js';
import type { Driver } from '../db/driver.js';
import { listenLoginRefused } from '../db/connection.js';
import { isOutOfTime, timeLimit } from '../lifecycle/time-limit.js';
import { Notifier } from '../notify/listener.js';
import { loadAssets, renderIndex } from './assets.js';
import { Authenticator, describeActor, SESSION_COOKIE } from './auth.js';
import { CsrfGuard } from './csrf.js';
import { HealthReports } from './health.js';
import { LiveFeed } from './live.js';
import { resolveDashboardOptions, type DashboardOptions } from './options.js';
import { registerApi } from './api.js';
import { registerWorkersApi } from './api-workers.js';
import { registerGroupsApi } from './groups.js';
import { loadOverview } from './overview.js';

/** Most connections the dashboard's own pool opens (LISTEN comes on top, on its own connection). */
/** Most time a dashboard statement may take, as the Worker's and Queue's default. */
const STATEMENT_TIMEOUT_MS = 30_000;
const POOL_SIZE = 4;
/** How often the LISTEN connection is checked with a round trip, and how long the check may take. */
const LISTEN_ROUND_TRIP_MS = 5_000;

// The page loads only its own scripts and styles; nothing may frame it (the
// actions are one click away, so clickjacking matters); no referrer leaks a URL.
const SECURITY_HEADERS = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cross-origin-resource-policy': 'same-origin',
};

/**
 * The dashboard as a Fastify plugin: register it in your own Fastify app, or
 * let `createDashboardHandler` / `startDashboard` do it for a plain Node server.
 *
 * @example
 *   await app.register(dashboardPlugin, { connectionString: process.env.DATABASE_URL, token: process.env.SLUICE_DASHBOARD_TOKEN, basePath: '/sluice' });
 */
export const dashboardPlugin: FastifyPluginAsync<DashboardOptions> = async (app, options) => {
  const config = resolveDashboardOptions(options);
  const { connectionString, pool, sql, listenConnectionString } = options;
  // One driver for the queries and the LISTEN: on pg that is a client of its own
  // when there is a URL, else one borrowed from your pool.
  // Statements are bounded as the Worker's and Queue's are by default: on a silent
  // network a request waited about a minute, on a connection never given up (outside review 84).
  const db = await openDriver(
    config.driver,
    { connectionString, pool, sql, listenConnectionString, statementTimeoutMs: STATEMENT_TIMEOUT_MS },
    POOL_SIZE,
    'sluice-dashboard',
  );
  if (listenConnectionString !== undefined) await checkListenLogin(db, config.schema, listenConnectionString);
  const onError = options.onError ?? ((err: unknown) => app.log.warn({ err }, 'sluice dashboard: live feed error'));
  // Checked with a round trip every few seconds: a silent network is found then (see LiveFeed).
  const notifier = new Notifier(db, channelFor(config.schema), LISTEN_ROUND_TRIP_MS);
  const feed = new LiveFeed({ load: () => loadOverview(db, config.schema), notifier, refreshMs: config.refreshMs, onError });
  const auth = new Authenticator(config);
  const csrf = new CsrfGuard();
  const assets = await loadAssets();
  const index = assets.get('index.html');
  if (!index) throw new Error('sluice dashboard: web/index.html is missing from the package');

  // Event streams hold their connections open: end them before the server waits for connections to close.
  app.addHook('preClose', async () => feed.close());
  // The requests have been answered by then: a statement still out (a status probe
  // given up on a silent network) has nobody waiting, and end() would wait for it.
  app.addHook('onClose', async () => {
    db.abort(new Error('sluice dashboard closed'));
    await db.end();
  });

  // Who made each request, for the audit log of the actions it takes.
  const actors = new WeakMap<FastifyRequest, string>();

  await app.register(
    async (scope: FastifyInstance) => {
      // Bodies are JSON only: a text/plain one was parsed as a string and refused as
      // "not a JSON object", where any other type is a 415 (outside review 170).
      scope.removeContentTypeParser('text/plain');
      scope.addHook('onRequest', async (req, reply) => {
        reply.headers(SECURITY_HEADERS);
        // The base path without its slash, first, query kept: the session cookie's path
        // ends in '/', so a ?token login there was refused, and so was every later visit
        // (outside review 242). The redirect says nothing an unknown caller may not know.
        const [path, query] = splitAtQuery(req.url);
        if (config.basePath !== '' && path === config.basePath) return reply.redirect(`${path}/${query}`, 308);
        const decision = auth.check({
          headers: req.headers,
          remoteAddress: req.socket.remoteAddress,
          // Given twice (?token=a&token=b) it is an array: a 500 from the comparison, before
          // any check (outside review 243). Taken as no token at all.
          queryToken: onlyString((req.query as { token?: unknown } | undefined)?.token),
        });
        if (!decision.ok) return refuse(req, reply, decision.status, decision.reason, auth.usesBasicAuth);
        if (decision.via === 'query-token') return startSession(req, reply, auth.session!, `${config.basePath}/`);
        actors.set(req, describeActor(decision, req.socket.remoteAddress));
        if (req.method !== 'GET' && req.method !== 'HEAD') {
          const why = csrf.reject(req.headers);
          if (why) return reply.code(403).send({ error: { code: 'CSRF', message: why } });
        }
      });

      scope.get('/', async (req, reply) => {
        // The page uses relative URLs, so it must be served from a path ending in '/'.
        const [path] = splitAtQuery(req.url);
        if (!path.endsWith('/')) return reply.redirect(`${path}/`, 308);
        return reply.type('text/html; charset=utf-8').header('cache-control', 'no-store').send(renderIndex(index, csrf.token));
      });

      scope.get('/assets/*', async (req, reply) => {
        const asset = assets.get(`assets/${(req.params as { '*': string })['*']}`);
        if (!asset) return reply.code(404).send({ error: { code: 'NOT_FOUND', message: 'no such file' } });
        return reply.type(asset.type).header('cache-control', 'no-cache').send(asset.body);
      });

      scope.get('/api/events', (req, reply) => {
        reply.hijack();
        reply.raw.setHeaders(new Map(Object.entries(SECURITY_HEADERS)));
        feed.attach(reply.raw);
      });

      registerApi(scope, {
        db,
        schema: config.schema,
        feed,
        loadOverview,
        health: new HealthReports(db, config.schema),
        actor: (req) => actors.get(req) ?? 'dashboard',
      });
      registerWorkersApi(scope, {
        db,
        schema: config.schema,
        feed,
        actor: (req) => actors.get(req) ?? 'dashboard',
        listenCheck: (ms) => notifier.check(ms),
      });
      registerGroupsApi(scope, { db, schema: config.schema, actor: (req) => actors.get(req) ?? 'dashboard' });
    },
    { prefix: config.basePath },
  );
};

function refuse(req: FastifyRequest, reply: FastifyReply, status: 401 | 403, reason: string, basic: boolean) {
  if (basic) reply.header('www-authenticate', 'Basic realm="Sluice dashboard", charset="UTF-8"');
  const wantsHtml = (req.headers.accept ?? '').includes('text/html');
  if (!wantsHtml)
    return reply.code(status).send({ error: { code: status === 401 ? 'UNAUTHORIZED' : 'FORBIDDEN', message: reason } });
  const hint = status === 401 && !basic ? '<p>Open this page with <code>?token=…</code> added to the address.</p>' : '';
  return reply
    .code(status)
    .type('text/html; charset=utf-8')
    .send(
      `<!doctype html><html lang="en"><meta charset="utf-8"><title>Sluice dashboard</title><h1>Sluice dashboard: ${reason}</h1>${hint}</html>`,
    );
}

/** `value` when it is a string, else undefined. */
function onlyString(value: unknown): string | undefined {
  return typeof value === 'string' ? value : undefined;
}

/** A request's path, and its query with the '?' (or ''). */
function splitAtQuery(url: string): [string, string] {
  const at = url.indexOf('?');
  return at === -1 ? [url, ''] : [url.slice(0, at), url.slice(at)];
}

/**
 * The token arrived in the address: keep it in an HttpOnly, SameSite=Strict
 * cookie and send the browser to the same address without it, so it does not
 * stay in the history or the address bar.
 */
function startSession(req: FastifyRequest, reply: FastifyReply, session: string, path: string) {
  const url = new URL(req.url, 'http://x');
  url.searchParams.delete('token');
  const secure = req.protocol === 'https' ? '; Secure' : '';
  reply.header('set-cookie', `${SESSION_COOKIE}=${session}; Path=${path}; HttpOnly; SameSite=Strict${secure}`);
  return reply.redirect(url.pathname + url.search, 303);
}

/**
 * A listen URL whose login Postgres refuses is a ConfigError at start, as a
 * worker's is: the dashboard started and its live feed never heard a thing
 * (outside review 231). One out of reach now may come back, and is left to the
 * feed's reconnects.
 */
async function checkListenLogin(db: Driver, schema: string, url: string): Promise<void> {
  const opening = db.listen(channelFor(schema), { notification: () => {}, lost: () => {} });
  try {
    // Not answered in time: left to the feed's reconnects. Waited for without a bound, a
    // server that never answers held the plugin past Fastify's start-up limit, and the
    // dashboard exited (outside review 235).
    const late = () => void opening.then((l) => l.close()).catch(() => {});
    await (await timeLimit(opening, LISTEN_CHECK_MS, late, 'listen check')).close();
  } catch (err) {
    if (isOutOfTime(err)) return;
    const refused = listenLoginRefused(err, url);
    if (refused === undefined) return;
    db.abort(new Error('sluice dashboard: not started'));
    await db.end();
    throw refused;
  }
}

/** How long the start waits for the listen URL's login (see checkListenLogin). */
const LISTEN_CHECK_MS = 3_000;
