import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { isLoopback, type ResolvedDashboardOptions } from './options.js';

export const SESSION_COOKIE = 'sluice_dashboard';

/** What the request hook needs to know about one request. */
export interface AuthRequest {
  headers: IncomingHttpHeaders;
  remoteAddress: string | undefined;
  /** The `token` query parameter, if any. */
  queryToken: string | undefined;
}

export type AuthDecision =
  | { ok: true; via: 'loopback' | 'token' | 'cookie' | 'basic' | 'query-token'; user?: string }
  | { ok: false; status: 401 | 403; reason: string };

/**
 * Decides whether a request may see the dashboard.
 *
 * Without a token or password only loopback clients are served, and only when
 * the Host header names loopback too: a page on some web site whose DNS name
 * is re-pointed at 127.0.0.1 ("DNS rebinding") would otherwise read and steer
 * the dashboard from the user's browser.
 */
export class Authenticator {
  private readonly sessionValue: string | undefined;

  constructor(private readonly options: Pick<ResolvedDashboardOptions, 'token' | 'basicAuth'>) {
    // The cookie carries a value derived from the token, not the token itself,
    // so a leaked cookie jar does not hand out the token for Bearer use.
    this.sessionValue = options.token
      ? createHmac('sha256', options.token).update('sluice-dashboard-session').digest('base64url')
      : undefined;
  }

  get required(): boolean {
    return this.options.token !== undefined || this.options.basicAuth !== undefined;
  }

  get usesBasicAuth(): boolean {
    return this.options.basicAuth !== undefined;
  }

  /** The cookie a browser gets after presenting the token once. */
  get session(): string | undefined {
    return this.sessionValue;
  }

  check(req: AuthRequest): AuthDecision {
    if (!this.required) {
      const host = hostName(req.headers.host);
      if (req.remoteAddress !== undefined && isLoopback(req.remoteAddress) && host !== undefined && isLoopback(host)) {
        return { ok: true, via: 'loopback' };
      }
      return {
        ok: false,
        status: 403,
        reason: 'this dashboard has no authentication configured and answers loopback requests only',
      };
    }
    const { token, basicAuth } = this.options;
    const authorization = req.headers.authorization ?? '';
    const [scheme = '', credentials = ''] = authorization.split(' ', 2);
    if (token !== undefined && scheme.toLowerCase() === 'bearer' && safeEqual(credentials, token)) {
      return { ok: true, via: 'token' };
    }
    if (basicAuth !== undefined && scheme.toLowerCase() === 'basic') {
      const decoded = Buffer.from(credentials, 'base64').toString('utf8');
      const colon = decoded.indexOf(':');
      // Compare both parts every time so the answer takes as long for a wrong user as for a wrong password.
      const userOk = safeEqual(decoded.slice(0, Math.max(colon, 0)), basicAuth.username);
      const passOk = safeEqual(decoded.slice(colon + 1), basicAuth.password);
      if (colon >= 0 && userOk && passOk) return { ok: true, via: 'basic', user: basicAuth.username };
    }
    if (this.sessionValue !== undefined) {
      const cookie = readCookie(req.headers.cookie, SESSION_COOKIE);
      if (cookie !== undefined && safeEqual(cookie, this.sessionValue)) return { ok: true, via: 'cookie' };
    }
    if (token !== undefined && req.queryToken !== undefined && safeEqual(req.queryToken, token)) {
      return { ok: true, via: 'query-token' };
    }
    return { ok: false, status: 401, reason: 'authentication required' };
  }
}

/** Constant-time string comparison (hashing first makes the lengths equal). */
export function safeEqual(a: string, b: string): boolean {
  const ha = createHash('sha256').update(a).digest();
  const hb = createHash('sha256').update(b).digest();
  return timingSafeEqual(ha, hb);
}

/** The host name of a Host header, without the port (IPv6 literals keep their brackets off). */
export function hostName(host: string | undefined): string | undefined {
  if (!host) return undefined;
  const bracketed = /^\[([^\]]+)\](?::\d+)?$/.exec(host);
  if (bracketed) return bracketed[1];
  return host.replace(/:\d+$/, '');
}

function readCookie(header: string | undefined, name: string): string | undefined {
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

/** How the audit log names whoever passed authentication, e.g. "dashboard token from 10.0.0.7". */
export function describeActor(decision: Extract<AuthDecision, { ok: true }>, remoteAddress: string | undefined): string {
  const who = decision.via === 'basic' ? `user ${decision.user}` : decision.via === 'loopback' ? 'loopback' : 'token';
  return `dashboard ${who} from ${remoteAddress ?? 'unknown address'}`;
}
