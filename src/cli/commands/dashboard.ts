import type { Command } from 'commander';
import { loginProblem } from '../../db/connection.js';
import { isConnectionFailure } from '../../errors.js';
import { globalOptions, requireDatabaseUrl, withDatabase } from '../database.js';
import { terminalText, UsageError } from '../output.js';
import { durationWithin } from '../parse.js';
import { addListenUrlOption } from '../pooler-options.js';

interface DashboardFlags {
  port: string;
  host: string;
  token?: string;
  user: string;
  password?: string;
  refresh?: number;
  refreshMs?: string;
  listenUrl?: string;
}

const MIN_REFRESH_MS = 100;
const MAX_REFRESH_MS = 3_600_000;

export function registerDashboard(program: Command): void {
  const cli = program
    .command('dashboard')
    .description('serve the web dashboard: queues, jobs, live updates, retry/cancel/delete')
    .option('--port <n>', 'port to listen on (0: any free port)', '4000')
    .option('--host <address>', 'address to bind; anything but loopback needs --token or --password', '127.0.0.1')
    .option('--token <token>', 'require this token (env: SLUICE_DASHBOARD_TOKEN); open the page once with ?token=<token>')
    .option('--user <name>', 'user name for --password', 'admin')
    .option('--password <password>', 'require HTTP basic auth with this password (env: SLUICE_DASHBOARD_PASSWORD)')
    // A duration with a unit, as every other duration flag takes (outside review: only this one took bare milliseconds).
    .option(
      '--refresh <duration>',
      'while a browser watches, re-read the statistics this often (500ms, 5s, 1m; default 5s)',
      durationWithin(MIN_REFRESH_MS, MAX_REFRESH_MS),
    )
    .option('--refresh-ms <n>', 'the same in milliseconds (kept for scripts that use it)');
  addListenUrlOption(cli).action(async (flags: DashboardFlags, command: Command) => {
    const global = globalOptions(command);
    const port = Number(flags.port);
    if (!/^\d+$/.test(flags.port) || port > 65_535) throw new UsageError('--port must be an integer from 0 to 65535');
    const refreshMs = refreshOf(flags);
    const token = flags.token ?? (process.env.SLUICE_DASHBOARD_TOKEN || undefined);
    const password = flags.password ?? (process.env.SLUICE_DASHBOARD_PASSWORD || undefined);
    // A user name without a password asked for basic auth and started without any (outside review 230).
    if (password === undefined && command.getOptionValueSource('user') === 'cli') {
      throw new UsageError('--user needs --password (or SLUICE_DASHBOARD_PASSWORD): without one there is no basic auth');
    }
    const url = requireDatabaseUrl(global);
    // Loaded here, not at the top: other commands should not pay for loading a web server.
    const { checkStartOptions, startDashboard } = await import('../../dashboard/server.js');
    const options = {
      connectionString: url,
      ...(flags.listenUrl === undefined ? {} : { listenConnectionString: flags.listenUrl }),
      schema: global.schema,
      host: flags.host,
      port,
      refreshMs,
      token,
      basicAuth: password === undefined ? undefined : { username: flags.user, password },
      onError: (err: unknown) =>
        process.stderr.write(`${terminalText(`sluice dashboard: ${err instanceof Error ? err.message : String(err)}`)}\n`),
    };
    checkStartOptions(options);
    // A refused login, a missing database or schema end the start, as they end a
    // worker's (outside review 265: it served their errors); a Postgres out of reach now
    // may come back, and the page says "unreachable" until it does.
    await withDatabase(command, async () => {}).catch((err: unknown) => {
      if (!isConnectionFailure(err) || loginProblem(err, url) !== undefined) throw err;
    });
    const dashboard = await startDashboard(options);
    const how = token ? ` (open it once with ?token=<your token>)` : password ? ` (user "${flags.user}")` : '';
    process.stdout.write(`sluice dashboard on ${dashboard.url}${how}\n`);
    await new Promise<void>((resolve) => {
      const stop = () => {
        process.off('SIGINT', stop);
        process.off('SIGTERM', stop);
        resolve();
      };
      process.on('SIGINT', stop);
      process.on('SIGTERM', stop);
    });
    await dashboard.close();
  });
}

/** How often the live feed re-reads, from --refresh or --refresh-ms (not both). */
function refreshOf(flags: DashboardFlags): number {
  if (flags.refreshMs === undefined) return flags.refresh ?? 5_000;
  if (flags.refresh !== undefined) throw new UsageError('give --refresh or --refresh-ms, not both');
  const refreshMs = Number(flags.refreshMs);
  if (!/^\d+$/.test(flags.refreshMs) || refreshMs < MIN_REFRESH_MS || refreshMs > MAX_REFRESH_MS)
    throw new UsageError(`--refresh-ms must be an integer from ${MIN_REFRESH_MS} to ${MAX_REFRESH_MS} (or use --refresh 5s)`);
  return refreshMs;
}
