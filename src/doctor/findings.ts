// What a doctor check reports, how bad each finding is, and where warn and
// critical begin: shared by the catalog checks (checks.ts) and the others.

export type Severity = 'ok' | 'warn' | 'critical';

/** One finding: what was measured, how bad it is, and what to do about it. */
export interface CheckResult {
  id: string;
  title: string;
  status: Severity;
  /** One line with the numbers. */
  summary: string;
  /** What to do, when status is not ok. */
  advice?: string;
  /** The measurements behind the summary (rows of the catalog views). */
  details: unknown[];
}

/** Where warn and critical begin. Durations in ms, ratios as fractions of 1. */
export interface DoctorThresholds {
  deadTupleRatio: [warn: number, critical: number];
  /** Tables with fewer dead tuples than this are never flagged (small tables churn harmlessly). */
  deadTupleMin: number;
  /**
   * While autovacuum is on and has vacuumed the table within this long (or has not
   * yet had a pass at it), a pile of dead tuples is a warning, not critical: a queue
   * that just drained a burst is all dead tuples until autovacuum's next pass.
   */
  vacuumWaitMs: number;
  /** A session waiting this long for a lock on one of the schema's tables or rows. */
  lockWaitMs: [number, number];
  idleInTransactionMs: [number, number];
  snapshotAgeMs: [number, number];
  /** Age in transactions of a replication slot's xmin. */
  slotXminAge: [number, number];
  notifyQueueUsage: [number, number];
  connectionUsage: [number, number];
  indexBloatRatio: [number, number];
  /** Indexes smaller than this are never flagged. */
  indexBloatMinBytes: number;
  backlogAgeMs: [number, number];
  /** A processing job whose heartbeat is older than this is stuck. */
  stuckMs: [number, number];
  /** Finished jobs older than this still in the hot table mean the pruner is not keeping up. */
  unprunedMs: [number, number];
  /** A recurring schedule whose next tick has been due this long with nothing enqueued. */
  cronOverdueMs: [number, number];
}

export const DEFAULT_THRESHOLDS: DoctorThresholds = {
  deadTupleRatio: [0.2, 0.5],
  deadTupleMin: 10_000,
  vacuumWaitMs: 600_000,
  lockWaitMs: [5_000, 30_000],
  idleInTransactionMs: [60_000, 600_000],
  snapshotAgeMs: [300_000, 1_800_000],
  slotXminAge: [10_000_000, 100_000_000],
  notifyQueueUsage: [0.5, 0.9],
  connectionUsage: [0.8, 0.95],
  indexBloatRatio: [0.5, 0.8],
  indexBloatMinBytes: 10 * 1024 * 1024,
  backlogAgeMs: [300_000, 3_600_000],
  stuckMs: [300_000, 3_600_000],
  unprunedMs: [3_600_000, 86_400_000],
  cronOverdueMs: [60_000, 3_600_000],
};

const RANK: Record<Severity, number> = { ok: 0, warn: 1, critical: 2 };

export function worst(levels: Severity[]): Severity {
  return levels.reduce<Severity>((a, b) => (RANK[b] > RANK[a] ? b : a), 'ok');
}

export function level(value: number, [warn, critical]: [number, number]): Severity {
  if (value >= critical) return 'critical';
  if (value >= warn) return 'warn';
  return 'ok';
}

export function result(
  id: string,
  title: string,
  status: Severity,
  summary: string,
  advice: string,
  details: unknown[],
): CheckResult {
  return status === 'ok' ? { id, title, status, summary, details } : { id, title, status, summary, advice, details };
}
