// Talks to the dashboard's JSON API with relative URLs, so the page works
// wherever the dashboard is mounted (/, /sluice/, ...).

const csrfToken = document.querySelector('meta[name="sluice-csrf"]')?.getAttribute('content') ?? '';

export class ApiError extends Error {
  /** @param {number} status @param {string} code @param {string} message */
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/**
 * GET api/<path> and return the parsed JSON.
 * @param {string} path @param {Record<string, string | undefined>} [params]
 */
export function get(path, params) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params ?? {})) if (value) query.set(key, value);
  const qs = query.toString();
  return request(`api/${path}${qs ? `?${qs}` : ''}`, { headers: { accept: 'application/json' } });
}

/**
 * POST a state-changing action. Carries the CSRF token in a header that
 * another site could not set without our permission.
 * @param {string} path @param {unknown} [body]
 */
export function post(path, body = {}) {
  return request(`api/${path}`, {
    method: 'POST',
    headers: { accept: 'application/json', 'content-type': 'application/json', 'x-sluice-csrf': csrfToken },
    body: JSON.stringify(body),
  });
}

/** @param {string} url @param {RequestInit} init */
async function request(url, init) {
  const res = await fetch(url, { ...init, credentials: 'same-origin' });
  const data = await res.json().catch(() => ({}));
  if (!res.ok) {
    const error = data.error ?? {};
    const message = error.message ?? `${res.status} ${res.statusText}`;
    // Say plainly which part is down: a panel shows this message as it is.
    throw new ApiError(res.status, error.code ?? 'HTTP', error.code === 'CONNECTION' ? `Database unreachable: ${message}` : message);
  }
  return data;
}
