import { ConfigError } from '../errors.js';

/**
 * What is wrong with a database URL, or undefined when pg and postgres.js can use
 * it. Both read any string as a URL: "not-a-url" became a connection to a host
 * named "base" (ENOTFOUND base), and mysql://… got as far as a TypeError. The
 * answer says what the URL must look like, without echoing it (it may hold a
 * password).
 */
export function databaseUrlProblem(url: string): string | undefined {
  const scheme = /^([a-z][a-z0-9+.-]*):/i.exec(url)?.[1]?.toLowerCase();
  const shape = 'postgres://user:password@host:5432/database';
  if (scheme === 'postgres' || scheme === 'postgresql') {
    // "postgres:/x" (one slash) made pg fall back to PGHOST or localhost:5432, another server maybe (outside review 103).
    if (!/^[a-z]+:\/\//i.test(url))
      return `the database URL must begin with ${scheme}:// (two slashes); it should look like ${shape}`;
    // libpq's socket form, postgresql://user@/db?host=/run/postgresql, has an empty host, which URL refuses and pg takes.
    const parsable = URL.canParse(url) || URL.canParse(url.replace(/^([a-z]+:\/\/[^/?#]*@)(?=[/?#]|$)/i, '$1localhost'));
    return parsable
      ? undefined
      : `the database URL is not a valid URL; it should look like ${shape} (special characters in the password percent-encoded)`;
  }
  if (scheme === 'socket' || url.startsWith('/')) return undefined; // a Unix socket, as pg also accepts
  // "localhost:5432" reads as the scheme "localhost": not named as one (outside review 262: "not localhost:").
  if (scheme && /^[a-z][a-z0-9+.-]*:\d/i.test(url)) return `the database URL has no scheme; it should look like ${shape}`;
  return scheme
    ? `the database URL must be a postgres:// or postgresql:// URL, not ${scheme}:`
    : `the database URL is not a URL; it should look like ${shape}`;
}

/**
 * A ConfigError naming the option when a URL a driver is about to be opened with
 * is not one it can use. Checked where every caller's URLs arrive, so none of them
 * hands pg a string it misreads.
 */
export function checkConnectionUrls(connection: {
  connectionString?: string;
  listenConnectionString?: string;
  pool?: unknown;
  sql?: unknown;
}): void {
  for (const key of ['connectionString', 'listenConnectionString'] as const) {
    // A pool or sql of yours is used instead of connectionString (not instead of listenConnectionString).
    const url = key === 'connectionString' && (connection.pool || connection.sql) ? undefined : connection[key];
    const problem = typeof url === 'string' ? databaseUrlProblem(url) : undefined;
    if (problem) throw new ConfigError(`${key}: ${problem}`);
  }
}
