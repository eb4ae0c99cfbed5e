import { VERSION } from '../version.js';
import { hostname } from 'node:os';
import type { Queryable } from '../db/executor.js';
import { workerRegistryStatements } from '../db/statements/workers.js';
import {
  ConfigError,
  isBehindMigrations,
  isInsufficientPrivilege,
  isNotMigrated,
  MigrationError,
  type SluiceError,
} from '../errors.js';
import { Loop } from '../lifecycle/loop.js';

/** A row not refreshed for this many of its intervals belongs to a dead worker. */
export const MISSED_INTERVALS_DEAD = 3;
/** ... and is deleted by the maintenance leader after this many. */
export const MISSED_INTERVALS_PRUNED = 20;

/** What a worker publishes about itself. */
export interface RegistryEntry {
  workerId: string;
  schema: string;
  queues: readonly string[];
  tasks: readonly string[];
  concurrency: number;
  /** How often the row is refreshed. */
  intervalMs: number;
  /** After how long without a heartbeat its jobs may be rescued (the rescuer reads it). */
  visibilityTimeoutMs: number;
  /** How often its heartbeats renew its jobs' locks: the row's pace while it lists row-held jobs. */
  heartbeatIntervalMs: number;
  /**
   * Its jobs whose rows another session holds: the rescuer leaves them to it while
   * the row was refreshed within the visibility timeout.
   */
  rowHeld(): readonly string[];
}

/**
 * Keeps this worker's row in the workers table (migration 0017): written at
 * start, refreshed every `intervalMs` (jittered, one statement; nothing per job),
 * deleted on stop. Readers count a row as alive while it was refreshed within
 * MISSED_INTERVALS_DEAD intervals, so a worker that crashed drops out by itself.
 *
 * The registry is for people and checks, and for the rescuer's timing: when it
 * cannot be written (a schema not migrated to 0017, a role without rights on the
 * table) the worker says so once and runs on without it, its jobs rescued after
 * the leader's visibility timeout instead of its own.
 */
export class WorkerRegistry {
  private readonly loop: Loop;
  private readonly values: unknown[];
  private disabled = false;

  constructor(
    private readonly db: Queryable,
    private readonly entry: RegistryEntry,
    private readonly error: (err: unknown) => void,
  ) {
    this.values = [
      entry.workerId,
      hostname(),
      process.pid,
      entry.queues,
      entry.tasks,
      entry.concurrency,
      VERSION,
      entry.intervalMs,
      entry.visibilityTimeoutMs,
    ];
    // While it lists jobs whose rows are held, the row stands in for their
    // heartbeats: refreshed as often, so a worker killed meanwhile is seen dead
    // after a visibility timeout, as its other jobs are.
    this.loop = new Loop({
      pass: () => this.publish(),
      intervalMs: () => (entry.rowHeld().length > 0 ? Math.min(entry.intervalMs, entry.heartbeatIntervalMs) : entry.intervalMs),
      jitter: [0.8, 1],
      onError: error,
    });
  }

  /**
   * Writes the row now and every interval from then on. Not awaited by the
   * worker's start: in an outage that would hold start() for a statement timeout,
   * for a row nothing depends on. A failed write is reported; the next pass retries.
   */
  start(): void {
    this.loop.start();
    void this.loop.trigger();
  }

  /**
   * Writes the row now (or right after the write in flight): jobs whose rows
   * another session holds were found, and the rescuer must know before their locks
   * outlast the visibility timeout.
   */
  refresh(): void {
    void this.loop.trigger();
  }

  /**
   * Stops refreshing and deletes the row, so the worker leaves the list at once.
   * `rowHeld`: jobs the worker leaves because another session holds their rows;
   * the row then stays, marked stopped, listing them, so that the rescuer returns
   * them once the rows are free without counting their attempt. `leftRunning`:
   * the worker leaves jobs processing (handlers that ignored their signal): the
   * row stays, marked stopped, so that the rescuer still gives them this worker's
   * visibility timeout. Deleted, they got the leader's (outside review 164: rescued
   * 4.8 s after the stop of a worker at 60 s, its handler still running).
   */
  async stop(rowHeld: readonly string[] = [], leftRunning = false): Promise<void> {
    await this.loop.stop();
    if (this.disabled) return;
    const statements = workerRegistryStatements(this.entry.schema);
    try {
      if (rowHeld.length > 0 || leftRunning) await this.db.query(statements.stopHolding, [this.entry.workerId, rowHeld]);
      else await this.db.query(statements.remove, [this.entry.workerId]);
    } catch (err) {
      // Readers drop the row after a few intervals anyway, and the leader deletes it later.
      this.error(err);
    }
  }

  private async publish(): Promise<void> {
    if (this.disabled) return;
    try {
      await this.db.query(workerRegistryStatements(this.entry.schema).upsert, [...this.values, this.entry.rowHeld()]);
    } catch (err) {
      const why = unusable(err, this.entry.schema);
      if (!why) throw err;
      this.disabled = true;
      void this.loop.stop();
      this.error(why);
    }
  }
}

/**
 * What a worker the registry lacks risks: the rescuer knows its visibility timeout
 * from there alone (outside review 282: a 1-day worker's healthy job rescued every
 * 30 s, a dead letter in 3.5 min, and the message did not say so).
 */
const RESCUED_EARLY =
  ", and its jobs are rescued after the maintenance leader's visibility timeout, not its own: with a longer one, " +
  'they are taken from it while they run';

/** The errors that retrying will not fix, as the one report the worker gives; undefined for the others. */
function unusable(err: unknown, schema: string): SluiceError | undefined {
  if (isNotMigrated(err)) {
    return new MigrationError(
      `schema ${JSON.stringify(schema)} has no workers table (migration 0017): run \`sluice migrate\`; ` +
        `until then this worker runs jobs but is missing from the dashboard and from the unknown-tasks check${RESCUED_EARLY}`,
      { cause: err },
    );
  }
  if (isBehindMigrations(err)) {
    return new MigrationError(
      `schema ${JSON.stringify(schema)} was migrated by an older version of Sluice (its workers table lacks a column of migration 0034 or 0036): ` +
        'run `sluice migrate`; until then this worker runs jobs but is missing from the dashboard, and its jobs are ' +
        "rescued after the maintenance leader's visibility timeout, not its own, even while another session holds their rows",
      { cause: err },
    );
  }
  if (isInsufficientPrivilege(err)) {
    return new ConfigError(
      `this worker's role may not write ${schema}.workers: grant it select, insert, update and delete on that table ` +
        `(sql/roles.sql); until then it runs jobs but is missing from the dashboard and from the unknown-tasks check${RESCUED_EARLY}`,
      { cause: err },
    );
  }
  return undefined;
}
