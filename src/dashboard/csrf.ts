import { randomBytes } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { safeEqual } from './auth.js';

export const CSRF_HEADER = 'x-sluice-csrf';

/**
 * Guards every state-changing request (retry, cancel, delete, pause ...) against
 * cross-site request forgery, three ways, each enough on its own in a modern browser:
 *
 * 1. A token the page received inside its HTML must come back in a custom header.
 *    Another site cannot read our HTML (same-origin policy), and a custom header
 *    on a cross-site request needs a CORS preflight that we never grant.
 * 2. `Sec-Fetch-Site`, when the browser sends it, must be `same-origin`.
 * 3. `Origin`, when present, must name the host the request was sent to.
 *
 * The session cookie is also `SameSite=Strict`, so a forged request would not
 * even be authenticated. The token is per dashboard instance: every user who
 * passed authentication is equally trusted, so there is nothing finer to bind it to.
 */
export class CsrfGuard {
  readonly token = randomBytes(24).toString('base64url');

  /** Why the request must be refused, or undefined when it may proceed. */
  reject(headers: IncomingHttpHeaders): string | undefined {
    const site = headers['sec-fetch-site'];
    if (site !== undefined && site !== 'same-origin') return `cross-site request refused (Sec-Fetch-Site: ${site})`;
    const origin = headers.origin;
    if (origin !== undefined && originHost(origin) !== headers.host) return 'cross-origin request refused';
    const sent = headers[CSRF_HEADER];
    if (typeof sent !== 'string' || !safeEqual(sent, this.token)) return `missing or wrong ${CSRF_HEADER} header`;
    return undefined;
  }
}

function originHost(origin: string): string | undefined {
  try {
    return new URL(origin).host;
  } catch {
    return undefined;
  }
}
