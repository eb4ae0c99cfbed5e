import { hostname, userInfo } from 'node:os';

/** What the admin API takes as an actor. */
const MAX_ACTOR_LENGTH = 256;

/**
 * Who the audit log says acted, for the CLI's actions: the OS user, the host and
 * the process, so that across a fleet `jobs retry --failed` or `jobs delete` can be
 * traced to where it was run (outside review 230: every CLI action was "cli").
 */
export const CLI_ACTOR = `cli ${osUser()}@${hostname() || 'unknown-host'} pid ${process.pid}`.slice(0, MAX_ACTOR_LENGTH);

function osUser(): string {
  try {
    return userInfo().username;
  } catch {
    // A uid with no entry in /etc/passwd (containers) has no name.
    return process.env.USER || process.env.LOGNAME || `uid ${process.getuid?.() ?? '?'}`;
  }
}
