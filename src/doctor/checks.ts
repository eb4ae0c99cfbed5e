import { quoteSchema } from '../db/identifiers.js';
import { firstFew, formatBytes, formatMs, percent } from './format.js';
import { level, result, worst, type CheckResult, type DoctorThresholds, type Severity } from './findings.js';

export interface SessionRow {
  pid: number;
  user: string | null;
  application: string | null;
  state: string | null;
  idle_ms?: number;
  transaction_ms: number | null;
  xmin_age?: number;
  last_query?: string;
  query?: string;
}

export interface LockWaitRow {
  /** null for a prepared transaction (application: 'prepared transaction <gid>'). */
  pid: number | null;
  user: string;
  application: string;
  state: string | null;
  /** How long it has waited for a lock; null for a session that only holds one. */
  waiting_ms: number | null;
  transaction_ms: number | null;
  /** The schema's tables it holds in ACCESS EXCLUSIVE mode, or null. */
  holds_exclusive: string | null;
  query: string;
  blocked_by: { pid: number; user: string; application: string; state: string; transaction_ms: number | null; query: string }[];
}

type Session = Pick<LockWaitRow, 'pid' | 'user' | 'application' | 'state' | 'transaction_ms' | 'query'>;

/** "pid 7 (app, idle in transaction, transaction open 3 min): query"; a prepared transaction by its name. */
function describeSession(s: Session): string {
  const open = s.transaction_ms === null ? '' : `, transaction open ${formatMs(s.transaction_ms)}`;
  if (s.pid === null) return `${s.application} (owner ${s.user}${open})`;
  return `pid ${s.pid} (${s.application || s.user}, ${s.state ?? 'no state'}${open}): ${s.query}`;
}

/**
 * Sessions held up by a lock on the schema's tables or rows, and who holds them
 * up; and sessions holding one of its tables exclusively. A long transaction with
 * a LOCK TABLE or ALTER queued behind it freezes the whole queue, and every other
 * check then waits too (outside review 230). `heldUpMs`: a check of this run
 * waited that long and gave up, so the freeze is already that long: critical
 * (outside review 231: said ok, the wait seen at 1.4 s, below the warning).
 */
export function checkLockWaits(rows: LockWaitRow[], t: DoctorThresholds, heldUpMs?: number): CheckResult {
  const waiters = rows.filter((r) => r.waiting_ms !== null);
  const holders = rows.filter((r) => r.holds_exclusive !== null);
  const status = worst([
    ...waiters.map((r) => level(r.waiting_ms!, t.lockWaitMs)),
    ...holders.map((r) => level(r.transaction_ms ?? 0, t.lockWaitMs)),
    heldUpMs === undefined ? 'ok' : 'critical',
  ]);
  const said: string[] = [];
  const longest = waiters[0];
  if (longest) {
    const blocker = longest.blocked_by[0];
    said.push(
      `${waiters.length} session(s) wait for a lock on the schema's tables; longest: pid ${longest.pid} ` +
        `(${longest.application || longest.user}) waiting ${formatMs(longest.waiting_ms!)}` +
        (blocker ? `, held up by ${describeSession(blocker)}` : ''),
    );
  }
  // Named once: a holder that is also the longest waiter's blocker is said as holding.
  const blockerPid = longest?.blocked_by[0]?.pid;
  if (blockerPid !== undefined && holders.some((h) => h.pid === blockerPid))
    said[0] = said[0]!.replace(/, held up by .*$/s, `, held up by pid ${blockerPid}`);
  for (const h of holders.slice(0, 3)) said.push(`${describeSession(h)} holds ${h.holds_exclusive} exclusively`);
  if (heldUpMs !== undefined) said.push(`checks of this run waited ${formatMs(heldUpMs)} and gave up`);
  return result(
    'lock_waits',
    "sessions waiting for locks on the schema's tables",
    status,
    said.length === 0 ? "no session waits for a lock on the schema's tables" : said.join('; '),
    'Workers, enqueues and these checks wait behind the same lock. End what holds it (pid above): ' +
      'COMMIT or ROLLBACK the open transaction, or pg_terminate_backend(pid); a prepared transaction with ' +
      "COMMIT PREPARED or ROLLBACK PREPARED '<gid>'; run ALTER or VACUUM FULL with lock_timeout.",
    rows,
  );
}

export function checkIdleInTransaction(rows: SessionRow[], t: DoctorThresholds): CheckResult {
  const status = worst(rows.map((r) => level(r.idle_ms ?? 0, t.idleInTransactionMs)));
  const longest = rows[0];
  const summary =
    rows.length === 0
      ? 'no session is idle in a transaction'
      : `${rows.length} session(s) idle in a transaction; longest: pid ${longest!.pid} (${longest!.application || longest!.user}) idle ${formatMs(longest!.idle_ms ?? 0)}`;
  return result(
    'idle_in_transaction',
    'sessions idle in transaction',
    status,
    summary,
    'A transaction left open holds its snapshot and locks: vacuum cannot remove rows deleted since it began. ' +
      'Find the code that forgets COMMIT/ROLLBACK (pid, application above); set idle_in_transaction_session_timeout; ' +
      'pg_terminate_backend(pid) ends it now.',
    rows,
  );
}

export interface PreparedRow {
  gid: string;
  owner: string;
  xmin_age: number;
  transaction_ms: number;
}

export function checkSnapshots(sessions: SessionRow[], prepared: PreparedRow[], t: DoctorThresholds): CheckResult {
  const all = [
    ...sessions.map((s) => ({ kind: 'session', who: `pid ${s.pid} (${s.application || s.user})`, ...s })),
    ...prepared.map((p) => ({ kind: 'prepared transaction', who: `prepared transaction '${p.gid}'`, ...p })),
  ];
  const status = worst(all.map((r) => level(r.transaction_ms ?? 0, t.snapshotAgeMs)));
  const oldest = [...all].sort((a, b) => (b.transaction_ms ?? 0) - (a.transaction_ms ?? 0))[0];
  const summary = oldest
    ? `oldest snapshot: ${oldest.who}, transaction open ${formatMs(oldest.transaction_ms ?? 0)}, ${oldest.xmin_age} transactions behind`
    : 'no other session holds a snapshot';
  return result(
    'oldest_snapshot',
    'oldest snapshot holding back vacuum',
    status,
    summary,
    'Vacuum keeps every row version that this snapshot might still see, so dead tuples grow for as long as it ' +
      'lives. End the long transaction (or long-running query / forgotten prepared transaction: COMMIT PREPARED or ' +
      'ROLLBACK PREPARED); run reports on a replica; set statement_timeout.',
    all,
  );
}

export interface SlotRow {
  slot: string;
  type: string;
  active: boolean;
  xmin_age: number | null;
  catalog_xmin_age: number | null;
}

export function checkReplicationSlots(rows: SlotRow[], t: DoctorThresholds): CheckResult {
  const details = rows.map((r) => {
    const age = Math.max(r.xmin_age ?? 0, r.catalog_xmin_age ?? 0);
    let status = level(age, t.slotXminAge);
    if (!r.active && (r.xmin_age !== null || r.catalog_xmin_age !== null) && status === 'ok') status = 'warn';
    return { ...r, status };
  });
  const bad = details.filter((d) => d.status !== 'ok');
  const summary =
    rows.length === 0
      ? 'no replication slots'
      : bad.length === 0
        ? `${rows.length} slot(s), none pinning xmin`
        : bad
            .map(
              (d) =>
                `slot ${d.slot} (${d.active ? 'active' : 'inactive'}) pins xmin ${Math.max(d.xmin_age ?? 0, d.catalog_xmin_age ?? 0)} transactions back`,
            )
            .join('; ');
  return result(
    'replication_slots',
    'replication slots pinning xmin',
    worst(details.map((d) => d.status)),
    summary,
    'A slot whose consumer is gone (or lagging) keeps vacuum from removing dead rows and keeps WAL. Reconnect ' +
      'the consumer, or drop the slot with pg_drop_replication_slot(name) if nothing uses it.',
    details,
  );
}

export function checkNotifyQueue(usage: number, t: DoctorThresholds): CheckResult {
  return result(
    'notify_queue',
    'NOTIFY queue',
    level(usage, t.notifyQueueUsage),
    `pg_notification_queue_usage() = ${percent(usage)}`,
    'The notification queue fills when a session that LISTENs stays in a long transaction (it cannot consume). ' +
      'When it is full, NOTIFY (and so every enqueue) fails. Find the long transaction among the LISTENing sessions.',
    [{ usage }],
  );
}

export interface ConnectionRow {
  used: number;
  sluice: number;
  /** Of `sluice`, workers' and relays' direct LISTEN connections (application_name sluice-listen). */
  listening: number;
  max: number;
  reserved: number;
}

export function checkConnections(row: ConnectionRow, t: DoctorThresholds): CheckResult {
  const available = Math.max(1, row.max - row.reserved);
  // Superusers' sessions past the others' share sit in the slots kept for them: told
  // apart, not counted as 28 of 27 in use, 104% (outside review 239).
  const inReserved = Math.max(0, row.used - available);
  const usage = (row.used - inReserved) / available;
  return result(
    'connections',
    'connections',
    level(usage, t.connectionUsage),
    `${row.used - inReserved} of ${available} connections in use (${percent(usage)})` +
      (inReserved > 0 ? `, and ${inReserved} of the ${row.reserved} kept for superusers` : '') +
      `, ${row.sluice} by Sluice` +
      (row.listening > 0 ? ` (${row.listening} of them workers' or relays' own connections to listen on)` : ''),
    'Near max_connections new workers and your application cannot connect. Put a pooler (PgBouncer in ' +
      'transaction mode, with listen: false or a direct listenConnectionString) in front, or lower pool sizes. ' +
      'Behind a pooler already, each worker with a direct LISTEN still holds one connection of its own: run ' +
      'some workers with listen: false (--no-listen, and a --poll-interval of 500ms to 1s), see "Many worker processes".',
    [{ ...row, available, usage }],
  );
}

export interface IndexRow {
  index: string;
  table: string;
  entries: number;
  pages: number;
  block_size: number;
  key_width: number;
  bytes: number;
}

/**
 * Expected B-tree size from entries × entry size (8-byte tuple header, aligned key,
 * 4-byte line pointer) at the default 90% leaf fill, plus the meta page; the rest
 * of the actual pages is the bloat estimate. Rough (ignores inner pages and
 * deduplication) but enough to tell 20% from 90%.
 */
export function estimateIndexBloat(r: IndexRow): { expected_pages: number; bloat_ratio: number | null } {
  if (r.entries < 0 || r.pages <= 1) return { expected_pages: r.pages, bloat_ratio: r.entries < 0 ? null : 0 };
  const entry = 8 + Math.ceil(r.key_width / 8) * 8 + 4;
  const usable = (r.block_size - 24 - 16) * 0.9;
  const expected = Math.ceil((r.entries * entry) / usable) + 1;
  return { expected_pages: expected, bloat_ratio: Math.max(0, 1 - expected / r.pages) };
}

/**
 * An index whose entries would fit in this many pages belongs to a table a burst
 * came through and left (nearly) empty: its pages, deleted by vacuum, are reused by
 * the next burst, so its size is that burst's, not growth (outside review 205: the
 * outbox's primary key critical, "100% bloat", right after the relays drained it).
 */
const EMPTIED_PAGES = 2;

export function checkIndexBloat(rows: IndexRow[], t: DoctorThresholds): CheckResult {
  const details = rows.map((r) => {
    const estimate = estimateIndexBloat(r);
    const emptied = estimate.bloat_ratio !== null && estimate.expected_pages <= EMPTIED_PAGES;
    const status =
      r.bytes < t.indexBloatMinBytes || estimate.bloat_ratio === null || emptied
        ? 'ok'
        : level(estimate.bloat_ratio, t.indexBloatRatio);
    return { ...r, ...estimate, emptied, status };
  });
  const bad = details.filter((d) => d.status !== 'ok');
  const largest = [...details].sort((a, b) => b.bytes - a.bytes)[0];
  const summary =
    bad.length > 0
      ? bad.map((d) => `${d.index}: ${formatBytes(d.bytes)}, about ${percent(d.bloat_ratio ?? 0)} bloat`).join('; ')
      : largest
        ? `${details.length} indexes; largest ${largest.index} ${formatBytes(largest.bytes)}, ` +
          (largest.emptied
            ? 'emptied (its pages are reused by the next burst)'
            : `about ${percent(largest.bloat_ratio ?? 0)} bloat`)
        : 'no indexes';
  return result(
    'index_bloat',
    'index bloat (estimate)',
    worst(details.map((d) => d.status)),
    summary,
    'Queue indexes see every row come and go; emptied pages are reused only after vacuum. ' +
      'REINDEX INDEX CONCURRENTLY <index> rebuilds one without blocking the queue. If it comes back, ' +
      'look for what stops vacuum (snapshots, slots).',
    details,
  );
}

export interface BacklogRow {
  queue: string;
  due: number;
  oldest_ms: number;
  /** A paused queue's backlog waits on purpose: reported, never a warning (outside review 109). */
  paused?: boolean;
}

export function checkBacklog(rows: BacklogRow[], t: DoctorThresholds): CheckResult {
  const details = rows.map((r) => ({ ...r, status: r.paused ? ('ok' as const) : level(r.oldest_ms, t.backlogAgeMs) }));
  // Worst first, then the longest wait: with thousands of queues the line names the ones to look at
  // (it listed them all, one line without end: outside review 127); --json's details keep every queue.
  const rank: Record<Severity, number> = { critical: 0, warn: 1, ok: 2 };
  const ordered = [...details].sort((a, b) => rank[a.status] - rank[b.status] || b.oldest_ms - a.oldest_ms);
  const summary =
    rows.length === 0
      ? 'no due jobs waiting'
      : firstFew(
          ordered.map((d) => `${d.queue}${d.paused ? ' (paused)' : ''}: ${d.due} due, oldest waiting ${formatMs(d.oldest_ms)}`),
          'queues',
          5,
          '; ',
        );
  return result(
    'backlog',
    'pending backlog',
    worst(details.map((d) => d.status)),
    summary,
    'Due jobs wait longer than they should: no worker runs for the queue (or for those tasks), or workers ' +
      'are too few. Start workers with that queue, raise concurrency, or check `sluice jobs` for tasks nobody handles. ' +
      'A paused queue waits until `sluice queues resume`.',
    details,
  );
}

export interface StuckRow {
  queue: string;
  jobs: number;
  /** The oldest heartbeat's age. */
  oldest_ms: number;
  /** How long past its worker's visibility timeout the most overdue job is: what the thresholds measure. */
  overdue_ms: number;
  sample_ids: string[];
}

export function checkStuck(rows: StuckRow[], t: DoctorThresholds): CheckResult {
  const details = rows.map((r) => ({ ...r, status: level(r.overdue_ms, t.stuckMs) }));
  const summary =
    rows.length === 0
      ? // Only jobs past the warning threshold are read: younger ones are a crash the rescuer has yet to see
        // (outside review 248: "no processing job without a heartbeat" while one had none for 35 s).
        `no processing job without a heartbeat for ${formatMs(t.stuckMs[0])} or more past its worker's visibility timeout`
      : details
          .map(
            (d) =>
              `${d.queue}: ${d.jobs} processing without heartbeat for ${formatMs(d.oldest_ms)}, ` +
              `${formatMs(d.overdue_ms)} past the visibility timeout (ids ${d.sample_ids.join(', ')})`,
          )
          .join('; ');
  return result(
    'stuck',
    'stuck processing jobs',
    worst(details.map((d) => d.status)),
    summary,
    'Their workers died and nothing rescued them. With no leader (see the maintenance check), no worker runs ' +
      'the rescuer: start one on this schema; it takes the lease and returns them to pending. With a leader, its ' +
      "rescuer is failing: see that worker's error events and log.",
    details,
  );
}

export interface MaintenanceRow {
  leader: string | null;
  /** The worker holding the pruner's lease: one whose pruner is on. */
  pruner: string | null;
  /** Live leases ("role: holder") whose holder is no live registered worker. */
  not_live: string[] | null;
  finished: number;
  /** Failed jobs among `finished`: kept for their retention, not the pruner's lag. */
  dead_letters: number;
  /** The oldest completed or cancelled job's age since it finished. */
  oldest_finished_ms: number | null;
  active: number;
}

/** Finished jobs this old with no pruner-lease holder are a warning (the pruner's default delay is 1 min). */
const NO_PRUNER_WARN_MS = 600_000;

export function checkMaintenance(row: MaintenanceRow, t: DoctorThresholds, schema: string): CheckResult {
  const lag = row.oldest_finished_ms ?? 0;
  let status = level(lag, t.unprunedMs);
  if (!row.leader && row.active > 0 && status === 'ok') status = 'warn';
  // Nothing holds the pruner's lease while finished jobs wait past the pruner's
  // default delay many times over: no worker that may prune is running (outside
  // review 190: "all checks passed" with only --no-pruner workers left).
  if (!row.pruner && lag >= NO_PRUNER_WARN_MS && status === 'ok') status = 'warn';
  const notLive = row.not_live ?? [];
  if (notLive.length > 0 && status === 'ok') status = 'warn';
  const summary =
    `leader: ${row.leader ?? 'none'}; pruner: ${row.pruner ?? 'none'}; ` +
    (notLive.length > 0 ? `held by no live worker: ${notLive.join(', ')}; ` : '') +
    `${row.finished} finished jobs in the hot table` +
    (row.dead_letters > 0 ? ` (${row.dead_letters} failed, kept as dead letters)` : '') +
    (row.oldest_finished_ms !== null ? `, oldest completed or cancelled ${formatMs(lag)} ago` : '');
  return result(
    'maintenance',
    'maintenance leader and pruning',
    status,
    summary,
    'Finished jobs are moved out by the worker holding the pruner lease, one of those whose pruner is on. ' +
      'No leader: no worker of this schema is running (or all run with maintenance: false). No pruner: every ' +
      'worker runs with pruner: false (--no-pruner); run one as the schema owner with the pruner on. A pruner but ' +
      "old completed or cancelled jobs: it is failing, see the worker's error events; or it runs in mode 'delete', " +
      'which keeps completed jobs for their retention: give unprunedMs above it. A lease held by no live worker: ' +
      `its worker died and the lease runs out within maintenance.leaseMs, or the row was written by hand (${quoteSchema(schema)}.leader): ` +
      'delete it.',
    [row],
  );
}
