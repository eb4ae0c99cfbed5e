import type { Queryable } from '../db/executor.js';
import { outboxStatements } from '../db/statements/outbox.js';
import { wrapDatabaseError } from '../errors.js';

/** How far behind the relays of one destination are. */
export interface OutboxLag {
  destination: string;
  partitions: number;
  /** Messages past the slowest partition's watermark (not yet published, or published by a faster partition). */
  waiting: number;
  /** Age of the oldest of those, in seconds (0 when none waits). */
  oldestSeconds: number;
  /** Messages published since the destination's relays first started. */
  published: number;
  /** Partitions whose lease is held now. */
  relaysHolding: number;
  lastPublishedAt: Date | null;
  deadLetters: number;
  /** Messages the broker refused at least once and that are still being retried. */
  failing: number;
}

interface LagRow {
  destination: string;
  partitions: number;
  waiting: string;
  oldest_seconds: number;
  published: string;
  held: number;
  last_published_at: Date | null;
  dead_letters: string;
  failing: string;
}

/** The lag of every destination that a relay has ever started on (for metrics, doctor, `sluice relay --status`). */
export async function outboxLag(db: Queryable, schema: string): Promise<OutboxLag[]> {
  let rows: unknown[];
  try {
    ({ rows } = await db.query(outboxStatements(schema).lag));
  } catch (err) {
    // With the migrate hint of a missing table, as the other outbox calls give (outside review 173).
    throw wrapDatabaseError(err, 'outboxLag');
  }
  return (rows as LagRow[]).map((r) => ({
    destination: r.destination,
    partitions: r.partitions,
    waiting: Number(r.waiting),
    oldestSeconds: Number(r.oldest_seconds),
    published: Number(r.published),
    relaysHolding: r.held,
    lastPublishedAt: r.last_published_at,
    deadLetters: Number(r.dead_letters),
    failing: Number(r.failing),
  }));
}
