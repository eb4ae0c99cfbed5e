import type { Command } from 'commander';
import { join } from 'node:path';
import pg from 'pg';
import { connectionError, describeTarget, loginProblem, type PgPool } from '../db/connection.js';
import { databaseUrlProblem } from '../db/database-url.js';
import { migrateStatements, type MigrateStatements } from '../db/statements/migrate.js';
import {
  ConfigError,
  isConnectionFailure,
  isInsufficientPrivilege,
  isNotMigrated,
  SluiceError,
  wrapDatabaseError,
} from '../errors.js';
import { CommandFailed, UsageError } from './output.js';

export interface GlobalOptions {
  databaseUrl?: string;
  schema: string;
}

/** The options every command shares, from flags or the environment. */
export function globalOptions(command: Command): GlobalOptions {
  const opts = command.optsWithGlobals<GlobalOptions>();
  return { databaseUrl: opts.databaseUrl ?? process.env.DATABASE_URL, schema: opts.schema };
}

/** The connection string, or a usage error naming both ways to give one. */
export function requireDatabaseUrl(options: GlobalOptions): string {
  if (!options.databaseUrl) throw new UsageError('no database: pass --database-url or set DATABASE_URL');
  checkDatabaseUrl(options.databaseUrl);
  return options.databaseUrl;
}

/** A UsageError when `url` is not one pg can use (see databaseUrlProblem). */
export function checkDatabaseUrl(url: string): void {
  const problem = databaseUrlProblem(url);
  if (problem) throw new UsageError(problem);
}

/** Where `sluice demo` keeps its embedded Postgres between runs. */
export const DEMO_DATA_DIR = join(process.cwd(), '.sluice', 'demo-pg');

// A command line must not hang on a host that drops packets.
const CONNECT_TIMEOUT_MS = 10_000;

export interface CommandDatabase {
  pool: PgPool;
  url: string;
  schema: string;
  /**
   * The command is up (a worker or relay started, a watch began): from now on a
   * long run is no sign of a lock wait, and the slow notice is not said.
   */
  started(): void;
}

/**
 * After this long without an answer a command says why it may be waiting. Its
 * statements wait, as Postgres's do, for a row or table another session holds
 * locked (an open transaction, an admin in psql), with no limit: a silent wait
 * read as a hang (outside review 92). A lock_timeout was not set for them: as a
 * startup parameter a default PgBouncer refuses the connection, and a session SET
 * would outlive the command on a transaction-mode server connection.
 */
const SLOW_NOTICE_MS = 5_000;

/**
 * Opens a small pool for one command, checks that Postgres answers and that the
 * schema holds Sluice's tables, runs `fn`, and always ends the pool. Failures
 * become one line: where the database is (never the password), and what to do.
 */
export function withDatabase<T>(command: Command, fn: (db: CommandDatabase) => Promise<T>): Promise<T> {
  return openFor(command, fn, {});
}

/**
 * withDatabase for a command that serves until a signal (worker, relay), which
 * calls `started()` once it is up: a long run is no sign of a lock wait, a long
 * start is (outside review 260: a worker started behind a LOCK TABLE said nothing
 * for 19 s). With `waitForPostgres`, a Postgres that cannot be
 * reached yet (down, restarting, starting up) is waited for, as a Worker's start()
 * does: a worker started during a restart or failover exited 1, and under systemd
 * or Kubernetes that is a crash loop (outside review 102). A refused login, a
 * missing database or schema still end the command.
 */
export function withDatabaseUntilStopped<T>(
  command: Command,
  fn: (db: CommandDatabase) => Promise<T>,
  options: OpenOptions = {},
): Promise<T> {
  return openFor(command, fn, options);
}

/** How a command opens its database (see withDatabase and withDatabaseUntilStopped). */
interface OpenOptions {
  /** Wait for a Postgres that cannot be reached yet, saying so through `notice`. */
  waitForPostgres?: boolean;
  notice?: WaitNotice;
  /**
   * The check that the schema holds Sluice's tables, which the command's role may
   * read: by default the jobs table; `sluice relay` reads the outbox (outside review
   * 210: the relay's role, which may not read jobs, was refused).
   */
  probe?: (statements: MigrateStatements) => string;
}

/**
 * How a wait for Postgres is said: 'waiting' (with the reason), 'reached' (with
 * the seconds it took) and 'slow' (no answer for a few seconds: see
 * slowNoticeText). By default a `sluice: …` line on stderr; a command with
 * --json says it as a JSON line (outside review 204: plain text among the JSON).
 */
export type WaitNotice = (
  event: 'waiting' | 'reached' | 'slow',
  fields: { error?: string; afterS?: number; note?: string },
) => void;

/** A WaitNotice said through a command's own log (`line`: its JSON lines under --json), on stderr. */
export function loggedWaitNotice(
  line: (event: string, fields: Record<string, string | number>, to: NodeJS.WritableStream) => void,
): WaitNotice {
  return (event, { error, afterS, note }) =>
    event === 'waiting'
      ? line('waiting-for-postgres', { error: error ?? '' }, process.stderr)
      : event === 'reached'
        ? line('reached-postgres', { afterS: afterS ?? 0 }, process.stderr)
        : line('still-waiting', { note: note ?? '' }, process.stderr);
}

const plainNotice: WaitNotice = (event, fields) =>
  process.stderr.write(
    event === 'waiting'
      ? `sluice: ${fields.error}; waiting for it (Ctrl-C gives up)\n`
      : event === 'reached'
        ? `sluice: reached Postgres after ${fields.afterS} s\n`
        : `sluice: ${fields.note}\n`,
  );

/** Tries to connect again this often while Postgres cannot be reached, and says so again this often. */
const RECONNECT_MS = 2_000;
const REPEAT_NOTICE_MS = 60_000;

/** Resolves once `pool` hands out a connection; waits for Postgres while `wait` and it cannot be reached. */
async function reach(pool: PgPool, url: string, wait: boolean, notice: WaitNotice): Promise<void> {
  // From the first try: a silent network's first failure comes after the connect timeout (outside review 260).
  const since = Date.now();
  let waited = false;
  let noticed = -Infinity;
  for (;;) {
    try {
      const client = await pool.connect();
      try {
        // A statement, not the login alone: a pooler (PgBouncer) accepts the login
        // itself and fails the first statement when it cannot reach Postgres ("server
        // login has been failing"), which ended a worker started just after a restart
        // (outside review 176).
        await client.query('SELECT 1');
      } finally {
        client.release();
      }
      if (waited) notice('reached', { afterS: Math.round((Date.now() - since) / 1000) });
      return;
    } catch (err) {
      const failure = connectionError(err, url);
      // A pooler's refusal of the login comes as a connection error (08P01): not waited for.
      if (!wait || !isConnectionFailure(err) || loginProblem(err, url)) throw failure;
      waited = true;
      if (Date.now() - noticed >= REPEAT_NOTICE_MS) {
        noticed = Date.now();
        notice('waiting', { error: failure.message });
      }
      await new Promise((resolve) => setTimeout(resolve, RECONNECT_MS));
    }
  }
}

async function openFor<T>(
  command: Command,
  fn: (db: CommandDatabase) => Promise<T>,
  { waitForPostgres = false, notice = plainNotice, probe: probeOf = (q) => q.probe }: OpenOptions,
): Promise<T> {
  const global = globalOptions(command);
  const url = requireDatabaseUrl(global);
  const probe = probeOf(migrateStatements(global.schema));
  const pool = new pg.Pool({
    connectionString: url,
    max: 2,
    application_name: 'sluice-cli',
    connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    // A worker's or relay's check must not hold a connection beside its own budget
    // for pg's default 10 s (outside review 176: 20 workers started at once met
    // PgBouncer's max_client_conn).
    idleTimeoutMillis: 1_000,
  });
  pool.on('error', () => {});
  // A client's lost connection, reported before the command's statement hears of it, must not end the process.
  pool.on('connect', (client) => client.on('error', () => {}));
  // Said until the command is up, but not while a wait for Postgres says why itself.
  let slow: NodeJS.Timeout | undefined;
  const started = () => clearTimeout(slow);
  const armSlow = () => {
    started();
    slow = setTimeout(() => notice('slow', { note: slowNoticeText() }), SLOW_NOTICE_MS).unref();
  };
  const say: WaitNotice = (event, fields) => {
    if (event === 'waiting') started();
    if (event === 'reached') armSlow();
    notice(event, fields);
  };
  armSlow();
  try {
    await reach(pool, url, waitForPostgres, say);
    try {
      await pool.query(probe).catch((err: unknown) => {
        // A role that may not even read the schema: every command would fail, and the
        // worker's own check says the same in these words (outside review 157).
        if (!isInsufficientPrivilege(err)) throw err;
        throw new ConfigError(`${(err as Error).message}: grant the role ${ROLE_HINT}`, { cause: err });
      });
      return await fn({ pool, url, schema: global.schema, started });
    } catch (err) {
      throw explain(err, global.schema, url);
    }
  } finally {
    started();
    await pool.end();
  }
}

function slowNoticeText(): string {
  return (
    // Not only a lock: a read of a large table on a saturated server took 21-29 s with
    // no lock anywhere, and was sent looking for one (outside review 255).
    `still waiting for Postgres after ${SLOW_NOTICE_MS / 1000} s: the server may be busy, or a row or table ` +
    'this command needs locked by another session (an open transaction: see `sluice doctor` or pg_stat_activity). ' +
    'It goes on when it can; Ctrl-C gives up (a statement that has not finished changes nothing)'
  );
}

/** Who may run what, for the messages of refused commands. */
export const ROLE_HINT =
  'what its commands need (sql/roles.sql): sluice_enqueue for enqueue, sluice_worker for worker, sluice_outbox_relay ' +
  'for relay; the other commands ' +
  "need the schema's owner";

function explain(err: unknown, schema: string, url: string): unknown {
  // Only driver errors (they carry a SQLSTATE or errno `code`) are wrapped;
  // Sluice's own errors already say what went wrong, and a bug keeps its stack.
  const fromDriver = !(err instanceof SluiceError) && typeof (err as { code?: unknown } | null)?.code === 'string';
  const wrapped = fromDriver ? wrapDatabaseError(err, 'query failed') : err;
  if (isNotMigrated(err)) {
    return new CommandFailed(
      `no Sluice tables in schema ${JSON.stringify(schema)} at ${describeTarget(url)}: run \`sluice migrate\` first`,
    );
  }
  return wrapped;
}
