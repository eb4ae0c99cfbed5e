import { createServer, type IncomingMessage, type RequestListener, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import type {
  FastifyError,
  FastifyInstance,
  FastifyReply,
  FastifyRequest,
  FastifyServerFactory,
  FastifyServerOptions,
} from 'fastify';
import { ConfigError } from '../errors.js';
import { checkListenHost, listenError } from '../listen-error.js';
import { importPeer } from '../optional-peer.js';
import { checkBindSafety, resolveDashboardOptions, type DashboardOptions } from './options.js';
import { dashboardPlugin } from './plugin.js';
import { requestError } from './request-errors.js';

/** fastify is an optional peer dependency: only the dashboard needs it. */
/**
 * Longest path parameter (a queue's name, percent-encoded) the routes take. Fastify's
 * default of 100 refused queue names of 101 to 128 characters, which Sluice allows
 * (review 62); 128 characters of 4 UTF-8 bytes each, percent-encoded, are 1,536.
 */
const MAX_PARAM_LENGTH = 1_536;

async function loadFastify() {
  return (await importPeer<typeof import('fastify')>('fastify', 'the dashboard')).default;
}

export interface DashboardHandler {
  /** Pass requests for `basePath` (and below) here. */
  handle(req: IncomingMessage, res: ServerResponse): void;
  /** Ends live streams and the dashboard's connections. */
  close(): Promise<void>;
}

const MAX_MESSAGE_CHARS = 300;
const clipped = (message: string) =>
  message.length > MAX_MESSAGE_CHARS ? `${message.slice(0, MAX_MESSAGE_CHARS)}… (${message.length} characters)` : message;

/**
 * A request Node's HTTP parser cannot read (bytes past its Content-Length that
 * start no request, headers too large) never reaches Fastify: answered in the
 * API's shape, where Fastify's default was its own (outside review 170).
 */
function refuseMalformed(err: Error & { code?: string }, socket: Duplex): void {
  if (err.code === 'ECONNRESET' || !socket.writable) {
    socket.destroy();
    return;
  }
  const tooLarge = err.code === 'HPE_HEADER_OVERFLOW';
  const body = JSON.stringify({
    error: tooLarge
      ? { code: 'HEADERS_TOO_LARGE', message: "the request's headers are too large" }
      : { code: 'BAD_REQUEST', message: 'the request is not valid HTTP' },
  });
  socket.end(
    `HTTP/1.1 ${tooLarge ? '431 Request Header Fields Too Large' : '400 Bad Request'}\r\n` +
      'Content-Type: application/json; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n' +
      `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
}

/**
 * A Fastify instance of Sluice's own around the plugin. A path it does not serve
 * is a 404 in the API's error shape (`{ error: { code, message } }`), not
 * Fastify's own (`{ message, error, statusCode }`), which a client of the API had
 * to parse apart. In your own Fastify app, your not-found handler answers there.
 */
async function dashboardApp(
  options: DashboardOptions,
  fastifyOptions: Pick<FastifyServerOptions, 'forceCloseConnections'> & { serverFactory?: FastifyServerFactory },
): Promise<FastifyInstance> {
  const Fastify = await loadFastify();
  const answer = (reply: FastifyReply, status: number, code: string, message: string) =>
    void reply.code(status).header('x-content-type-options', 'nosniff').send({ error: { code, message } });
  const app = Fastify({
    // An HTTP/1.1 request without a Host header: refused below in the API's shape, where
    // Node's own refusal was a 400 with an empty body (outside review 218).
    http: { requireHostHeader: false },
    ...fastifyOptions,
    routerOptions: { maxParamLength: MAX_PARAM_LENGTH },
    // A path Fastify cannot decode (/api/%zz) never reaches a route or an error handler.
    // Its message quotes the whole path: cut (a 2,000-character path came back whole, outside review 169).
    frameworkErrors: (err, _req, reply) => answer(reply, 400, 'BAD_REQUEST', clipped(err.message)),
    clientErrorHandler: refuseMalformed,
  });
  app.addHook('onRequest', async (req, reply) => {
    if (req.raw.httpVersion === '1.1' && req.headers.host === undefined) {
      answer(reply, 400, 'BAD_REQUEST', 'the request has no Host header, which HTTP/1.1 requires');
      return reply;
    }
  });
  const notFound = (req: FastifyRequest, reply: FastifyReply) =>
    answer(reply, 404, 'NOT_FOUND', `no such route: ${req.method} ${req.url.split('?')[0]!.slice(0, 200)}`);
  app.setNotFoundHandler(notFound);
  // Errors outside the dashboard's routes; its own routes have their handler (api.ts).
  // A body refused on its way to a path the dashboard does not have is still a 404:
  // an empty JSON body there read "the body is empty" (outside review 218).
  app.setErrorHandler((err: FastifyError, req, reply) => {
    if (req.is404) return notFound(req, reply);
    const { status, code, message } = requestError(err);
    answer(reply, status, code, message);
  });
  await app.register(dashboardPlugin, options);
  return app;
}

/**
 * The dashboard as a request handler for a Node HTTP server you already run.
 * Route the requests under `basePath` to it; the rest stay yours.
 *
 * @example
 *   const dashboard = await createDashboardHandler({ connectionString, basePath: '/sluice', token: process.env.SLUICE_DASHBOARD_TOKEN });
 *   http.createServer((req, res) => req.url?.startsWith('/sluice') ? dashboard.handle(req, res) : app(req, res)).listen(3000);
 */
export async function createDashboardHandler(options: DashboardOptions): Promise<DashboardHandler> {
  let handler: RequestListener | undefined;
  // Fastify wants a server of its own; this one is never listened on, it only hands us the routing function.
  const app = await dashboardApp(options, {
    serverFactory: (h) => {
      handler = h as RequestListener;
      return createServer(h);
    },
  });
  await app.ready();
  return {
    handle: (req, res) => handler!(req, res),
    close: () => app.close(),
  };
}

export interface StartDashboardOptions extends DashboardOptions {
  /** Default 127.0.0.1. Any other address needs `token` or `basicAuth`. */
  host?: string;
  /** Default 4000; 0 picks a free port. */
  port?: number;
}

export interface RunningDashboard {
  /** Where the dashboard answers, e.g. http://127.0.0.1:4000/ */
  url: string;
  app: FastifyInstance;
  close(): Promise<void>;
}

/**
 * The checks startDashboard makes of where it listens and who may in, before it
 * connects: `sluice dashboard` makes them before its check of the database, so a
 * bind refused is told as such whatever the database says.
 */
export function checkStartOptions(options: StartDashboardOptions): void {
  const { host = '127.0.0.1', port = 4000, ...dashboardOptions } = options;
  if (!Number.isInteger(port) || port < 0 || port > 65_535)
    throw new ConfigError(`dashboard: port must be 0 to 65535, got ${port}`);
  checkListenHost('dashboard', host);
  checkBindSafety(host, dashboardOptions);
  resolveDashboardOptions(dashboardOptions);
}

/** Runs the dashboard on its own HTTP server (what `sluice dashboard` does). */
export async function startDashboard(options: StartDashboardOptions): Promise<RunningDashboard> {
  checkStartOptions(options);
  const { host = '127.0.0.1', port = 4000, ...dashboardOptions } = options;
  const app = await dashboardApp(dashboardOptions, { forceCloseConnections: true });
  try {
    await app.listen({ host, port });
  } catch (err) {
    await app.close();
    throw listenError(err, 'dashboard', host, port);
  }
  const address = app.server.address() as AddressInfo;
  const shownHost = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return {
    url: `http://${shownHost}:${address.port}${(dashboardOptions.basePath ?? '').replace(/\/$/, '')}/`,
    app,
    close: () => app.close(),
  };
}
