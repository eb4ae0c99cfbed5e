import type { Driver } from '../db/driver.js';
import type { Queryable } from '../db/executor.js';
import type { WorkerStatements } from '../db/statements/worker.js';
import { channelFor } from '../db/identifiers.js';
import { isBehindMigrations, isInsufficientPrivilege, isNotMigrated } from '../errors.js';
import { MISSED_INTERVALS_DEAD } from '../worker/registry.js';
import type { PeriodicTask } from './runner.js';

export interface RescuedJob {
  id: string;
  queue: string;
  status: 'pending' | 'failed';
}

const BATCH = 1_000;

/**
 * A rescue that took longer than this (ms, or a quarter of the visibility
 * timeout if less, but no less than the floor: a statement on a loaded machine
 * takes some) waited behind a lock, most likely one on the jobs table that held
 * the workers' heartbeats up too: see `rescue` in statements/worker.ts.
 */
const BLOCKED_MS = 1_000;
const BLOCKED_FLOOR_MS = 100;

/** How long a statement of the rescue may wait before it counts as blocked. */
export function blockedAfterMs(visibilityTimeoutMs: number): number {
  return Math.min(BLOCKED_MS, Math.max(BLOCKED_FLOOR_MS, visibilityTimeoutMs / 4));
}

/**
 * Gives back jobs whose worker stopped heartbeating (crashed, hung, cut off): any
 * live worker may run it; SKIP LOCKED keeps several rescuers from colliding.
 * Heartbeats count as no older than the times in `clock` (see rescuerTask).
 * Each job gets the visibility timeout its worker wrote in the registry, or
 * `visibilityTimeoutMs` where there is none. Rescued jobs that go back to pending
 * wake the workers of their queues.
 */
export async function rescueExpired(
  db: Queryable,
  queries: WorkerStatements,
  visibilityTimeoutMs: number,
  clock: RescuerClock = {},
): Promise<RescuedJob[]> {
  const registry = await fromRegistry(db, queries, visibilityTimeoutMs, clock.sinceUnreachableMs ?? null);
  return rescueWith(db, queries, visibilityTimeoutMs, registry, clock);
}

/** The rescue statement itself, given what the registry said, and the wake-up of the queues it gave jobs back to. */
async function rescueWith(
  db: Queryable,
  queries: WorkerStatements,
  visibilityTimeoutMs: number,
  registry: FromRegistry,
  { sinceUnreachableMs, sinceStartMs, spareAliveWorkers = false }: RescuerClock,
): Promise<RescuedJob[]> {
  const since = sinceUnreachableMs ?? null;
  const { rows } = (await db.query(queries.rescue, [
    visibilityTimeoutMs,
    BATCH,
    registry.workers,
    registry.ms,
    registry.heldBy,
    registry.held,
    registry.alive,
    since,
    sinceStartMs ?? null,
    blockedAfterMs(visibilityTimeoutMs),
    spareAliveWorkers ? registry.aliveWorkers : [],
  ])) as {
    rows: RescuedJob[];
  };
  const queues = [...new Set(rows.filter((r) => r.status === 'pending').map((r) => r.queue))];
  if (queues.length > 0) await db.query(queries.notify, [channelFor(queries.schema), queues]);
  return rows;
}

/**
 * What the rescuing worker knows of outages, in ms ago (see rescuerTask): when it
 * last found Postgres down (see isServerDown), and when it started.
 */
export interface RescuerClock {
  sinceUnreachableMs?: number;
  sinceStartMs?: number;
  /** Leave the jobs of workers the registry counts alive to them, whatever their locks say (see rescuerTask). */
  spareAliveWorkers?: boolean;
}

interface FromRegistry {
  /** Workers whose registered visibility timeout differs from the rescuer's, and theirs. */
  workers: string[];
  ms: number[];
  /**
   * (worker, job, alive): jobs a worker answers for though another session holds
   * their rows; left to it while it is alive, rescued without spending their
   * attempt once it stopped or died.
   */
  heldBy: string[];
  held: string[];
  alive: boolean[];
  /** Workers whose registry rows are alive (refreshed within MISSED_INTERVALS_DEAD intervals, not stopped). */
  aliveWorkers: string[];
}

/**
 * What the registry tells the rescue. Nothing where the registry cannot be read
 * (not migrated to 0036, a role without rights on it): the registry is optional,
 * the rescue is not, so it goes on with its own timeout.
 */
async function fromRegistry(
  db: Queryable,
  queries: WorkerStatements,
  visibilityTimeoutMs: number,
  sinceUnreachableMs: number | null,
): Promise<FromRegistry> {
  try {
    const { rows } = await db.query(queries.rescueTimeouts, [visibilityTimeoutMs, sinceUnreachableMs, MISSED_INTERVALS_DEAD]);
    const row = rows[0] as { [K in keyof FromRegistry]: FromRegistry[K] | null } | undefined;
    return {
      workers: row?.workers ?? [],
      ms: row?.ms ?? [],
      heldBy: row?.heldBy ?? [],
      held: row?.held ?? [],
      alive: row?.alive ?? [],
      aliveWorkers: row?.aliveWorkers ?? [],
    };
  } catch (err) {
    if (isNotMigrated(err) || isBehindMigrations(err) || isInsufficientPrivilege(err)) {
      return { workers: [], ms: [], heldBy: [], held: [], alive: [], aliveWorkers: [] };
    }
    throw err;
  }
}

/**
 * rescueExpired as a leader task: runs on one worker of the cluster, every
 * `intervalMs`. Heartbeats count as no older than the server's start, and, as that
 * does not say when a crash recovery ended (it can outlast the visibility timeout),
 * no older than this worker last found Postgres down (`clock`), and those
 * from before the server's start no older than this worker's own start: the
 * workers that could not heartbeat through an outage get a visibility timeout once
 * it is over (outside review 112: the leader took every running job 48 ms after
 * Postgres was ready, after 9 s of recovery; 113: a leader started after the
 * recovery did the same).
 */
export function rescuerTask(
  db: Driver,
  queries: WorkerStatements,
  visibilityTimeoutMs: number,
  intervalMs: number,
  rescued: (jobs: RescuedJob[]) => void,
  clock: () => RescuerClock = () => ({}),
): PeriodicTask {
  // performance.now() at the end of the latest pass that was held up (longer than
  // blockedAfterMs) or failed: heartbeats count as no older than that, as after an
  // outage. A lock on the jobs table held the workers' heartbeats as it held this
  // rescue: once it goes, they get a visibility timeout to land before anything of
  // theirs is rescued (outside review 145).
  let blockedAt: number | undefined;
  // performance.now() when this worker's passes began (it became the leader), and
  // of its latest pass. A leader that came in during such a lock (the old one
  // killed) may not have waited behind it, and knows nothing of it: for its first
  // visibility timeout it leaves the jobs of workers the registry counts alive to
  // them (outside review 146: it took them the moment the lock went).
  let leaderSince = 0;
  let lastRunAt: number | undefined;
  return {
    name: 'rescuer',
    intervalMs,
    run: async () => {
      const started = performance.now();
      if (lastRunAt === undefined || started - lastRunAt > 3 * intervalMs) leaderSince = started;
      lastRunAt = started;
      const { sinceUnreachableMs, sinceStartMs } = clock();
      const sinceBlockedMs = blockedAt === undefined ? undefined : started - blockedAt;
      const since = [sinceUnreachableMs, sinceBlockedMs].filter((ms): ms is number => ms !== undefined);
      const clockNow: RescuerClock = {
        sinceUnreachableMs: since.length > 0 ? Math.min(...since) : undefined,
        sinceStartMs,
        spareAliveWorkers: started - leaderSince < visibilityTimeoutMs,
      };
      // Held up before its statement reached Postgres: waiting for a connection of a
      // pool whose others all wait behind a lock, which the statement's own check
      // (how long it waited in Postgres) cannot see. It ran the moment the lock went,
      // before the workers' renewals, and failed jobs of one attempt that had never
      // stopped running (outside review 208). Such a pass takes nothing.
      const heldUp = () => performance.now() - started > blockedAfterMs(visibilityTimeoutMs);
      let jobs: RescuedJob[] | undefined;
      try {
        const registry = await fromRegistry(db, queries, visibilityTimeoutMs, clockNow.sinceUnreachableMs ?? null);
        // On a connection of its own, taken before the check: no second wait for one after it.
        jobs = heldUp()
          ? undefined
          : await db.transaction((tx) =>
              heldUp() ? Promise.resolve(undefined) : rescueWith(tx, queries, visibilityTimeoutMs, registry, clockNow),
            );
      } catch (err) {
        blockedAt = performance.now();
        throw err;
      }
      if (jobs === undefined || heldUp()) blockedAt = performance.now();
      if (jobs && jobs.length > 0) rescued(jobs);
    },
  };
}
