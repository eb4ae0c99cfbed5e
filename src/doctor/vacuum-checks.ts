/** The doctor's checks of dead tuples and autovacuum. */
import { formatBytes, formatMs, percent } from './format.js';
import { level, result, worst, type CheckResult, type DoctorThresholds, type Severity } from './findings.js';

export interface TableStats {
  table: string;
  live: number;
  dead: number;
  last_vacuum: Date | null;
  last_autovacuum: Date | null;
  last_autoanalyze: Date | null;
  autovacuum_count: number;
  total_bytes: number;
  reloptions: string[] | null;
  /** pg_class.reltuples, what autovacuum scales its trigger by (null: never counted). */
  reltuples?: number | null;
  /** The server's autovacuum_vacuum_threshold and _scale_factor (a table's reloptions override them). */
  vacuum_threshold?: number;
  vacuum_scale_factor?: number;
}

/**
 * autovacuum_enabled turned off in a table's reloptions, in any spelling Postgres
 * takes (stored as written: outside review 124, =off was missed).
 */
export function autovacuumOff(reloptions: readonly string[] | null): boolean {
  return (reloptions ?? []).some((o) => /^autovacuum_enabled=(f|fa|fal|fals|false|n|no|of|off|0)$/i.test(o));
}

/**
 * Dead tuples at which autovacuum vacuums the table: threshold + scale factor x
 * reltuples, the table's own settings first. Below it they are expected, however
 * high their share: an outbox the relay emptied is all dead tuples until then
 * (outside review 122: the doctor said critical for an idle, healthy outbox).
 */
export function autovacuumTrigger(r: TableStats): number {
  const option = (name: string) => {
    const set = r.reloptions?.find((o) => o.startsWith(`${name}=`));
    return set === undefined ? undefined : Number(set.slice(name.length + 1));
  };
  if (autovacuumOff(r.reloptions)) return 0; // never: any pile counts
  const threshold = option('autovacuum_vacuum_threshold') ?? r.vacuum_threshold ?? 50;
  const scale = option('autovacuum_vacuum_scale_factor') ?? r.vacuum_scale_factor ?? 0.2;
  return threshold + scale * (r.reltuples ?? r.live);
}

/**
 * `autovacuumOn`: the server runs autovacuum (autovacuum and track_counts on). Then a
 * table it may vacuum, vacuumed within `vacuumWaitMs` or never yet, is at most a
 * warning: right after a burst every claimed row is dead until autovacuum's next
 * pass, and critical there paged after every burst (outside review 182). A vacuum
 * that runs but cannot remove them is the snapshot checks' to call critical.
 */
export function checkTables(rows: TableStats[], t: DoctorThresholds, autovacuumOn = true): CheckResult {
  const details = rows.map((r) => {
    const ratio = r.live + r.dead > 0 ? r.dead / (r.live + r.dead) : 0;
    const lastVacuum = [r.last_vacuum, r.last_autovacuum].filter(Boolean).map((d) => d!.getTime());
    const last = lastVacuum.length ? Math.max(...lastVacuum) : null;
    let status = r.dead < Math.max(t.deadTupleMin, autovacuumTrigger(r)) ? 'ok' : level(ratio, t.deadTupleRatio);
    const vacuumComing = autovacuumOn && !autovacuumOff(r.reloptions) && (last === null || Date.now() - last <= t.vacuumWaitMs);
    if (status === 'critical' && vacuumComing) status = 'warn';
    return { ...r, dead_ratio: ratio, status, last_any_vacuum: last === null ? null : new Date(last) };
  });
  const status = worst(details.map((d) => d.status));
  const bad = details.filter((d) => d.status !== 'ok');
  const jobs = details.find((d) => d.table === 'jobs');
  const describe = (d: (typeof details)[number]) => {
    const vac = d.last_any_vacuum ? `${formatMs(Date.now() - d.last_any_vacuum.getTime())} ago` : 'never';
    return `${d.table}: ${d.dead} dead / ${d.live} live (${percent(d.dead_ratio)}), ${formatBytes(d.total_bytes)}, last vacuum ${vac}`;
  };
  const summary =
    bad.length > 0
      ? bad.map(describe).join('; ')
      : jobs
        ? describe(jobs)
        : `${details.length} tables, none with many dead tuples`;
  return result(
    'tables',
    'dead tuples and vacuum',
    status,
    summary,
    'Dead tuples pile up when vacuum cannot run or cannot remove them. Look at the snapshot and ' +
      'idle-in-transaction checks first (an old snapshot makes vacuum useless); then run VACUUM (VERBOSE) on ' +
      'the table, and check that autovacuum is on and not starved (autovacuum_max_workers, cost limits).',
    details,
  );
}

export interface AutovacuumRow {
  autovacuum: boolean;
  track_counts: boolean;
  naptime: string;
  disabled_tables: string[];
}

export function checkAutovacuum(row: AutovacuumRow): CheckResult {
  const off = [!row.autovacuum && 'autovacuum = off', !row.track_counts && 'track_counts = off'].filter(Boolean);
  const status: Severity = off.length > 0 ? 'critical' : row.disabled_tables.length > 0 ? 'warn' : 'ok';
  const summary =
    off.length > 0
      ? `${off.join(', ')} on this server: dead tuples are never removed automatically`
      : row.disabled_tables.length > 0
        ? `autovacuum is disabled on ${row.disabled_tables.join(', ')}`
        : `autovacuum on (naptime ${row.naptime})`;
  return result(
    'autovacuum',
    'autovacuum',
    status,
    summary,
    'Every claim and completion leaves a dead row version; without autovacuum the queue table and its indexes ' +
      'grow without bound and claims slow down. Turn autovacuum (and track_counts) on in postgresql.conf, or ' +
      'ALTER TABLE ... RESET (autovacuum_enabled); until then run VACUUM on the jobs table from cron.',
    [row],
  );
}
