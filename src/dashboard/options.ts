import { checkConnection, resolveDriverName, type DriverConnectionOptions } from '../db/connection.js';
import type { DriverName } from '../db/driver.js';
import { ConfigError } from '../errors.js';
import { checks } from '../validate.js';

const { intOption, rejectUnknownKeys, schemaOption } = checks(ConfigError);

/** Who may use the dashboard. With neither, only loopback clients are served. */
export interface DashboardAuthOptions {
  /** A shared secret: `Authorization: Bearer <token>`, or `?token=` once in the browser (then a cookie). */
  token?: string | undefined;
  /** HTTP basic auth: the browser asks for a user name and password. */
  basicAuth?: { username: string; password: string };
}

export interface DashboardOptions extends DriverConnectionOptions, DashboardAuthOptions {
  /**
   * URL path the dashboard is mounted at when it shares a server, e.g. '/sluice'.
   * Default '' (the root).
   */
  basePath?: string | undefined;
  /**
   * While at least one browser watches, how often the server re-reads the
   * statistics to push changes that no NOTIFY announces (completions, failures).
   * Default 5000 ms. One read per dashboard process, not per browser.
   */
  refreshMs?: number;
  /** Database trouble in the background (the live feed's queries, the LISTEN connection). Default: Fastify's log. */
  onError?: (err: unknown) => void;
  /** Connection for LISTEN when `connectionString`/`pool` go through a transaction-mode pooler. */
  listenConnectionString?: string | undefined;
}

export interface ResolvedDashboardOptions {
  driver: DriverName;
  schema: string;
  basePath: string;
  refreshMs: number;
  token: string | undefined;
  basicAuth: { username: string; password: string } | undefined;
}

const KEYS = new Set([
  'connectionString',
  'pool',
  'sql',
  'driver',
  'schema',
  'token',
  'basicAuth',
  'basePath',
  'refreshMs',
  'listenConnectionString',
  'onError',
]);
const MIN_SECRET_LENGTH = 8;

/** Validates dashboard options (unknown keys, weak secrets, a malformed base path) → ConfigError. */
export function resolveDashboardOptions(options: DashboardOptions): ResolvedDashboardOptions {
  if (!options || typeof options !== 'object') throw new ConfigError('dashboard: options object required');
  rejectUnknownKeys(options, KEYS, 'dashboard');
  const driver = resolveDriverName(options, 'dashboard');
  if (!options.sql) checkConnection(options, 'dashboard');
  return {
    driver,
    schema: schemaOption(options.schema),
    basePath: resolveBasePath(options.basePath),
    refreshMs: intOption('refreshMs', options.refreshMs, 5000, 100, 3_600_000),
    token: options.token === undefined ? undefined : secret('token', options.token),
    basicAuth: resolveBasicAuth(options.basicAuth),
  };
}

function secret(name: string, value: unknown): string {
  if (typeof value !== 'string' || value.length < MIN_SECRET_LENGTH) {
    throw new ConfigError(`dashboard: ${name} must be a string of at least ${MIN_SECRET_LENGTH} characters`);
  }
  // Spaces alone: an unset variable padded by a template, not a secret (outside review 211).
  if (value.trim() === '') throw new ConfigError(`dashboard: ${name} must not be blank (spaces only)`);
  return value;
}

function resolveBasicAuth(value: DashboardOptions['basicAuth']): ResolvedDashboardOptions['basicAuth'] {
  if (value === undefined) return undefined;
  if (!value || typeof value !== 'object') throw new ConfigError('dashboard: basicAuth must be { username, password }');
  rejectUnknownKeys(value, new Set(['username', 'password']), 'dashboard basicAuth');
  if (typeof value.username !== 'string' || value.username.length === 0 || value.username.includes(':')) {
    throw new ConfigError('dashboard: basicAuth.username must be a non-empty string without ":"');
  }
  return { username: value.username, password: secret('basicAuth.password', value.password) };
}

function resolveBasePath(value: unknown): string {
  if (value === undefined || value === '' || value === '/') return '';
  if (typeof value !== 'string' || !/^(\/[A-Za-z0-9._~-]+)+\/?$/.test(value)) {
    throw new ConfigError(`dashboard: basePath must look like "/admin/sluice", got ${JSON.stringify(value)}`);
  }
  return value.replace(/\/$/, '');
}

/** True for addresses only this machine can reach. */
export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  return h === 'localhost' || h === '::1' || h === '::ffff:127.0.0.1' || /^127(\.\d{1,3}){3}$/.test(h);
}

/**
 * The dashboard steers queues: reachable from other machines it must ask who is
 * calling. Binding beyond loopback without a token or password is refused.
 */
export function checkBindSafety(host: string, auth: DashboardAuthOptions): void {
  if (!isLoopback(host) && auth.token === undefined && auth.basicAuth === undefined) {
    throw new ConfigError(
      `dashboard: refusing to listen on ${host} without authentication; give a token or a basic-auth password (or bind 127.0.0.1)`,
    );
  }
}
