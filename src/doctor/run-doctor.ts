import { checkConnection, resolveDriverName, type DriverConnectionOptions } from '../db/connection.js';
import { openDriver } from '../db/drivers/open.js';
import { rows, type Queryable } from '../db/executor.js';
import { quoteSchema } from '../db/identifiers.js';
import { ConfigError, wrapDatabaseError } from '../errors.js';
import * as checks from './checks.js';
import * as vacuum from './vacuum-checks.js';
import { checkCron } from './cron-check.js';
import { DEFAULT_THRESHOLDS, worst, type CheckResult, type DoctorThresholds, type Severity } from './findings.js';
import { doctorStatements } from '../db/statements/doctor.js';
import { checkUnknownTasks } from './unknown-tasks-check.js';
import { checkOutbox } from './outbox-check.js';
import { checks as optionChecks } from '../validate.js';

const { rejectUnknownKeys, schemaOption } = optionChecks(ConfigError);

export interface DoctorOptions extends DriverConnectionOptions {
  /** Run on this connection instead (e.g. a dashboard's pool). */
  db?: Queryable;
  /** Override where warn/critical begin. */
  thresholds?: Partial<DoctorThresholds>;
}

export interface DoctorReport {
  /** The worst status of all checks. */
  status: Severity;
  schema: string;
  checkedAt: string;
  checks: CheckResult[];
}

const OPTION_KEYS = new Set(['connectionString', 'pool', 'sql', 'driver', 'schema', 'db', 'thresholds']);

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
  if (options.db) return inspect(options.db, schema, thresholds);
  const driverName = resolveDriverName(options, 'runDoctor');
  if (!options.sql) checkConnection(options, 'runDoctor');
  const { connectionString, pool, sql } = options;
  const driver = await openDriver(driverName, { connectionString, pool, sql }, 1, 'sluice-doctor');
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
  rejectUnknownKeys(overrides, new Set(Object.keys(DEFAULT_THRESHOLDS)), 'thresholds');
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

async function inspect(db: Queryable, schema: string, t: DoctorThresholds): Promise<DoctorReport> {
  const q = doctorStatements(schema);
  const results: CheckResult[] = [];
  const [found] = await rows<{ installed: boolean }>(db, q.installed, [`${quoteSchema(schema)}.jobs`]);
  const installed = found?.installed === true;

  const tables = await rows<vacuum.TableStats>(db, q.tables, [schema]);
  const [server] = await rows<Omit<vacuum.AutovacuumRow, 'disabled_tables'>>(db, q.autovacuum);
  results.push(vacuum.checkTables(tables, t, server!.autovacuum && server!.track_counts));
  // One rule for "turned off" (autovacuumOff), over the rows the tables check read.
  const disabled = tables.filter((r) => vacuum.autovacuumOff(r.reloptions)).map((r) => r.table);
  results.push(vacuum.checkAutovacuum({ ...server!, disabled_tables: disabled }));
  results.push(checks.checkIdleInTransaction(await rows(db, q.idleInTransaction), t));
  results.push(checks.checkSnapshots(await rows(db, q.oldestSnapshots), await rows(db, q.preparedTransactions), t));
  results.push(checks.checkReplicationSlots(await rows(db, q.replicationSlots), t));
  results.push(checks.checkNotifyQueue((await rows<{ usage: number }>(db, q.notifyQueue))[0]!.usage, t));
  results.push(checks.checkConnections((await rows<checks.ConnectionRow>(db, q.connections))[0]!, t));
  results.push(checks.checkIndexBloat(await rows(db, q.indexes, [schema]), t));
  if (installed) {
    results.push(checks.checkBacklog(await rows(db, q.backlog), t));
    results.push(checks.checkStuck(await rows(db, q.stuck, [t.stuckMs[0]]), t));
    results.push(checks.checkMaintenance((await rows<checks.MaintenanceRow>(db, q.maintenance))[0]!, t));
    results.push(await checkUnknownTasks(db, schema, t));
    results.push(await checkCron(db, schema, t));
    results.push(await checkOutbox(db, schema));
  } else {
    results.push({
      id: 'schema',
      title: 'Sluice schema',
      status: 'critical',
      details: [],
      summary: `schema "${schema}" has no Sluice jobs table`,
      advice: 'Run `sluice migrate` (or migrate()) against this database and schema, or pass the right --schema.',
    });
  }
  return { status: worst(results.map((r) => r.status)), schema, checkedAt: new Date().toISOString(), checks: results };
}
