import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { freePort } from '../../src/dev/embedded-postgres.js';

export interface PgBouncer {
  /** Connection string of the pooler, same user, password and database as the target. */
  url: string;
  /** [major, minor] of the installed pgbouncer. */
  version: [number, number];
  /** True when this PgBouncer can track named prepared statements in transaction mode (>= 1.21). */
  tracksPreparedStatements: boolean;
  /** Its admin console (`SHOW POOLS`, `SHOW CLIENTS`), as the same user. */
  adminUrl: string;
  /** Process id, e.g. to read its CPU time from /proc. */
  pid: number;
  stop(): Promise<void>;
}

/** The installed pgbouncer's version (the Debian package `pgbouncer`). */
export function pgbouncerVersion(): [number, number] {
  const out = execFileSync('pgbouncer', ['--version'], { encoding: 'utf8' });
  const m = out.match(/PgBouncer (\d+)\.(\d+)/);
  if (!m) throw new Error(`cannot read the pgbouncer version from: ${out}`);
  return [Number(m[1]), Number(m[2])];
}

/**
 * Starts a PgBouncer of the test's own, in transaction pooling mode, on a free
 * loopback port, in front of `targetUrl`, with a config written to a temp dir.
 */
export async function startPgBouncer(targetUrl: string, poolSize = 2): Promise<PgBouncer> {
  const version = pgbouncerVersion();
  const tracksPreparedStatements = version[0] > 1 || version[1] >= 21;
  const target = new URL(targetUrl);
  const user = decodeURIComponent(target.username || 'postgres');
  const password = decodeURIComponent(target.password);
  const db = decodeURIComponent(target.pathname.slice(1)) || user;
  const port = await freePort();
  const dir = await mkdtemp(join(tmpdir(), 'sluice-pgbouncer-'));
  // pgbouncer refuses to run as root; it drops to `postgres`, which must write here.
  await chmod(dir, 0o777);
  const serverAuth = `user=${user}${password ? ` password=${password}` : ''}`;
  await writeFile(
    join(dir, 'pgbouncer.ini'),
    [
      '[databases]',
      `${db} = host=${target.hostname} port=${target.port || 5432} dbname=${db} ${serverAuth}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      'auth_type = trust',
      `admin_users = ${user}`,
      `auth_file = ${join(dir, 'userlist.txt')}`,
      'pool_mode = transaction',
      // Fewer server connections than clients: transactions of different clients
      // really do share server connections.
      `default_pool_size = ${poolSize}`,
      'max_client_conn = 500',
      'ignore_startup_parameters = extra_float_digits,options',
      ...(tracksPreparedStatements ? ['max_prepared_statements = 200'] : []),
      `pidfile = ${join(dir, 'pgbouncer.pid')}`,
      '',
    ].join('\n'),
  );
  await writeFile(join(dir, 'userlist.txt'), `"${user}" ""\n`);
  const asRoot = process.getuid?.() === 0;
  const child: ChildProcess = spawn('pgbouncer', [...(asRoot ? ['-u', 'postgres'] : []), join(dir, 'pgbouncer.ini')], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let log = '';
  child.stdout!.on('data', (d) => (log += d));
  child.stderr!.on('data', (d) => (log += d));
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
  const url = `postgres://${encodeURIComponent(user)}${password ? `:${encodeURIComponent(password)}` : ''}@127.0.0.1:${port}/${db}`;
  try {
    await acceptsConnections(url, child, () => log);
  } catch (err) {
    child.kill('SIGKILL');
    throw new Error(`${(err as Error).message}\n${log}`);
  }
  return {
    url,
    version,
    tracksPreparedStatements,
    adminUrl: url.replace(/\/[^/]*$/, '/pgbouncer'),
    pid: child.pid!,
    stop: async () => {
      child.kill('SIGTERM');
      await exited;
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/**
 * Resolves once `url` answers a query; polls, since pgbouncer says nothing when it
 * is ready. Not the tests' waitFor: benchmarks start PgBouncer too, outside vitest.
 */
async function acceptsConnections(url: string, child: ChildProcess, log: () => string): Promise<void> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`pgbouncer exited: ${log()}`);
    const client = new pg.Client({ connectionString: url });
    client.on('error', () => {});
    try {
      await client.connect();
      await client.query('SELECT 1');
      return;
    } catch (err) {
      if (Date.now() > deadline)
        throw new Error(`timed out waiting for pgbouncer to accept connections: ${(err as Error).message}`);
    } finally {
      await client.end().catch(() => {});
    }
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}
