import { checkConnection, resolveDriverName, type DriverConnectionOptions } from '../db/connection.js';
import { openDriver } from '../db/drivers/open.js';
import { rows, type Queryable } from '../db/executor.js';
import { quoteSchema } from '../db/identifiers.js';
import { ConfigError, wrapDatabaseError } from '../errors.js';
import { isOutOfTime } from '../lifecycle/time-limit.js';
import * as checks from './checks.js';
import * as vacuum from './vacuum-checks.js';
import { checkCron } from './cron-check.js';
import { DEFAULT_THRESHOLDS, worst, type CheckResult, type DoctorThresholds, type Severity } from './findings.js';
import { doctorStatements } from '../db/statements/doctor.js';
import { checkUnknownTasks } from './unknown-tasks-check.js';
import { checkOutbox } from './outbox-check.js';
import { checks as optionChecks } from '../validate.js';
import { MISSED_INTERVALS_DEAD } from '../worker/registry.js';
import { migrationLag } from '../migrate.js';

const { rejectUnknownKeys, schemaOption } = optionChecks(ConfigError);

export interface DoctorOptions extends DriverConnectionOptions {
  /** Run on this connection instead (e.g. a dashboard's pool). */
  db?: Queryable;
  /** Override where warn/critical begin. */
  thresholds?: Partial<DoctorThresholds>;
  /**
   * How long each statement, and each connection, of the doctor's own may take (not
   * `db`'s), default 10,000 ms: a check held up by a lock on the schema is then
   * reported as such, and a server that does not answer is a ConnectionError.
   */
  checkTimeoutMs?: number;
}

export interface DoctorReport {
  /** The worst status of all checks. */
  status: Severity;
  schema: string;
  checkedAt: string;
  checks: CheckResult[];
}

const OPTION_KEYS = new Set(['connectionString', 'pool', 'sql', 'driver', 'schema', 'db', 'thresholds', 'checkTimeoutMs']);

/**
 * Inspects the live database the way `sluice doctor` does and returns every
 * finding with its numbers and advice. Read-only; safe to run any time.
 * Statistics of other users' sessions need superuser or pg_read_all_stats.
 *
 * @example
 *   const report = await runDoctor({ connectionString: process.env.DATABASE_URL });
 *   if (report.status !== 'ok') console.log(report.checks.filter((c) => c.status !== 'ok'));
 */
export async function runDoctor(options: DoctorOptions): Promise<DoctorReport> {
  rejectUnknownKeys(options, OPTION_KEYS, 'runDoctor');
  const schema = schemaOption(options.schema);
  const thresholds = resolveThresholds(options.thresholds);
  const limitMs = options.checkTimeoutMs ?? CHECK_LIMIT_MS;
  // A timer's longest: past it Node fires at once (outside review 233: 1e12 became 1 ms).
  if (!Number.isInteger(limitMs) || limitMs < 1 || limitMs > MAX_TIMER_MS) {
    throw new ConfigError(`checkTimeoutMs must be an integer from 1 to ${MAX_TIMER_MS} (ms)`);
  }
  if (options.db) return inspect(options.db, schema, thresholds);
  const driverName = resolveDriverName(options, 'runDoctor');
  if (!options.sql) checkConnection(options, 'runDoctor');
  const { connectionString, pool, sql } = options;
  // Each statement within the limit (cancelled past it), so that a check held up by a
  // lock says so instead of holding the doctor (see inspect); and each connection it
  // opens: a server that accepts and never answers, or a pooler queueing for a
  // stopped Postgres, held it without a word (outside review 233).
  const driver = await openDriver(driverName, { connectionString, pool, sql, statementTimeoutMs: limitMs }, 1, 'sluice-doctor');
  try {
    return await inspect(driver, schema, thresholds);
  } catch (err) {
    throw wrapDatabaseError(err, 'doctor');
  } finally {
    await driver.end();
  }
}

function resolveThresholds(overrides: Partial<DoctorThresholds> | undefined): DoctorThresholds {
  if (overrides === undefined) return DEFAULT_THRESHOLDS;
  if (typeof overrides !== 'object' || overrides === null) throw new ConfigError('thresholds must be an object');
  // Named with every valid one: the names are not guessable (outside review 281 found four by guessing).
  const names = Object.keys(DEFAULT_THRESHOLDS);
  const unknown = Object.keys(overrides).find((key) => !names.includes(key));
  if (unknown !== undefined) {
    throw new ConfigError(`thresholds: unknown threshold ${JSON.stringify(unknown)}; the thresholds are ${names.join(', ')}`);
  }
  for (const [key, value] of Object.entries(overrides)) {
    if (value !== undefined) checkThreshold(key as keyof DoctorThresholds, value);
  }
  return { ...DEFAULT_THRESHOLDS, ...overrides };
}

/**
 * A threshold has its default's shape: a number, or [warn, critical] with warn ≤
 * critical. A string or a single number where a pair belongs compared as NaN and
 * turned the check off without a word.
 */
function checkThreshold(key: keyof DoctorThresholds, value: unknown): void {
  const isNumber = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v) && v >= 0;
  if (Array.isArray(DEFAULT_THRESHOLDS[key])) {
    if (!Array.isArray(value) || value.length !== 2 || !value.every(isNumber) || value[0]! > value[1]!)
      throw new ConfigError(`thresholds.${key} must be [warn, critical], two numbers ≥ 0 with warn ≤ critical`);
  } else if (!isNumber(value)) {
    throw new ConfigError(`thresholds.${key} must be a number ≥ 0`);
  }
}

/**
 * How long one check's statement may take on a connection the doctor opened
 * (checkTimeoutMs). A LOCK TABLE or ALTER queued behind a long transaction held the
 * doctor, silent, for as long as the lock did (outside review 230: 12 minutes, in
 * the very incident it is for).
 */
const CHECK_LIMIT_MS = 10_000;
const MAX_TIMER_MS = 2 ** 31 - 1;

async function inspect(db: Queryable, schema: string, t: DoctorThresholds): Promise<DoctorReport> {
  const q = doctorStatements(schema);
  const results: CheckResult[] = [];
  const [found] = await rows<{ installed: boolean }>(db, q.installed, [`${quoteSchema(schema)}.jobs`]);
  const installed = found?.installed === true;
  // First, and from the catalogs alone: what the checks below may wait behind.
  const lockRows = () => rows<checks.LockWaitRow>(db, q.lockWaits, [schema]);
  results.push(checks.checkLockWaits(await lockRows(), t));
  // A check whose statement ran out of time while sessions wait for, or hold, locks
  // on the schema is one that waited behind them too: said so, the lock check read
  // again and made critical, and the rest go on. Without such sessions the time-out
  // is a network's or a server's, and ends the run. Once one has, the checks left
  // that read the schema's tables are not run: each would wait as long.
  let heldUp = false;
  const attempt = async (ids: string[], check: () => Promise<CheckResult | CheckResult[]>): Promise<void> => {
    if (!heldUp) {
      const started = Date.now();
      try {
        const done = await check();
        results.push(...(Array.isArray(done) ? done : [done]));
        return;
      } catch (err) {
        if (!isOutOfTime(err)) throw err;
        // Read again: the session that waited may have been this one alone (outside review 231:
        // an ALTER holding the table, no one else queued, was told as Postgres out of reach).
        const now = await lockRows();
        if (now.length === 0) throw err;
        results[0] = checks.checkLockWaits(now, t, Date.now() - started);
        heldUp = true;
      }
    }
    for (const id of ids) {
      results.push({
        id,
        title: `${id}: not checked`,
        status: 'critical',
        summary: "its statements on the schema's tables wait behind the locks above",
        advice: 'See the lock check: once what holds the lock ends, run the doctor again.',
        details: [],
      });
    }
  };

  await attempt(['tables', 'autovacuum'], async () => {
    const tables = await rows<vacuum.TableStats>(db, q.tables, [schema]);
    const [server] = await rows<Omit<vacuum.AutovacuumRow, 'disabled_tables'>>(db, q.autovacuum);
    // One rule for "turned off" (autovacuumOff), over the rows the tables check read.
    const disabled = tables.filter((r) => vacuum.autovacuumOff(r.reloptions)).map((r) => r.table);
    return [
      vacuum.checkTables(tables, t, server!.autovacuum && server!.track_counts),
      vacuum.checkAutovacuum({ ...server!, disabled_tables: disabled }),
    ];
  });
  results.push(checks.checkIdleInTransaction(await rows(db, q.idleInTransaction), t));
  results.push(checks.checkSnapshots(await rows(db, q.oldestSnapshots), await rows(db, q.preparedTransactions), t));
  results.push(checks.checkReplicationSlots(await rows(db, q.replicationSlots), t));
  results.push(checks.checkNotifyQueue((await rows<{ usage: number }>(db, q.notifyQueue))[0]!.usage, t));
  results.push(checks.checkConnections((await rows<checks.ConnectionRow>(db, q.connections))[0]!, t));
  await attempt(['index_bloat'], async () => checks.checkIndexBloat(await rows(db, q.indexes, [schema]), t));
  // Read before the checks of Sluice's tables, which fail on a column a missing migration adds
  // (outside review 281: "column w.stopped_at does not exist", and no report).
  const lag = installed ? await migrationLag(db, schema) : undefined;
  if (installed && lag === undefined) {
    await attempt(['backlog'], async () => checks.checkBacklog(await rows(db, q.backlog), t));
    await attempt(['stuck'], async () => checks.checkStuck(await rows(db, q.stuck, [t.stuckMs[0]]), t));
    await attempt(['maintenance'], async () =>
      checks.checkMaintenance((await rows<checks.MaintenanceRow>(db, q.maintenance, [MISSED_INTERVALS_DEAD]))[0]!, t, schema),
    );
    await attempt(['unknown_tasks'], () => checkUnknownTasks(db, schema, t));
    await attempt(['cron'], () => checkCron(db, schema, t));
    await attempt(['outbox_lag'], () => checkOutbox(db, schema));
  } else {
    results.push({
      id: 'schema',
      title: 'Sluice schema',
      status: 'critical',
      details: [],
      summary: lag ?? `schema ${JSON.stringify(schema)} has no Sluice jobs table`,
      advice: lag
        ? "Run `sluice migrate` (or migrate()) against this database and schema; the checks of Sluice's tables wait for it."
        : 'Run `sluice migrate` (or migrate()) against this database and schema, or pass the right --schema.',
    });
  }
  return { status: worst(results.map((r) => r.status)), schema, checkedAt: new Date().toISOString(), checks: results };
}
