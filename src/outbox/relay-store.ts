import type { Driver } from '../db/driver.js';
import { rows, type Queryable } from '../db/executor.js';
import { preparedName } from '../db/identifiers.js';
import type { OutboxStatements } from '../db/statements/outbox.js';
import type { RelayMessage } from './publishers/publisher.js';

/** A position in a destination's walk: the (txid, id) of a row, compared in that order. */
export interface Position {
  txid: string;
  id: string;
}

export const START: Position = { txid: '0', id: '0' };

/**
 * The most payload bytes a window holds (besides its first message, whatever its
 * size): with the next window read ahead, a relay holds about twice this per
 * partition, whatever batchSize and the messages' size.
 */
export const WINDOW_BYTES = 16 * 1024 * 1024;

/** One window of the walk: this partition's messages in it, and where it ends. */
export interface Window {
  messages: RelayMessage[];
  /** The positions of `messages`, in the same order. */
  positions: Position[];
  /** The last row of the window (any partition's); undefined when the window was empty. */
  end: Position | undefined;
}

interface WindowRow {
  id: string;
  txid: string;
  key: string | null;
  headers: Record<string, string> | null;
  payload: Buffer | null;
  created_at: Date | null;
  marker: boolean;
}

/**
 * The relay's typed operations over the outbox statements. Alone knows their
 * parameter order. Statement names make pg parse the hot ones once per connection.
 */
export class RelayStore {
  /** The txid of this store's clean-up transaction while it deletes; left out of the horizon (see fetchWindow). */
  private cleanupTxid: string | null = null;
  /** `<schema>:<outbox identity>:`, before each message's id (loadIdentity). */
  private messagePrefix = '';

  constructor(
    private readonly db: Driver,
    private readonly q: OutboxStatements,
    /** Whether the hot read is a named prepared statement (not behind PgBouncer < 1.21). */
    private readonly prepared = true,
  ) {}

  get driver(): Driver {
    return this.db;
  }

  /**
   * Creates a destination's partitions, or changes their count where that is safe
   * (see repartition). Returns the count it is relayed with and why that cannot
   * change, or undefined when done. One registration at a time (lockRegistrations).
   */
  async register(destination: string, partitions: number): Promise<{ other: number; refused: string } | undefined> {
    return this.db.transaction(async (tx) => {
      await tx.query(this.q.lockRegistrations);
      const counts = await rows<{ partitions: number }>(tx, this.q.partitionCounts, [destination]);
      const other = counts.map((r) => r.partitions).find((n) => n !== partitions);
      if (other !== undefined) {
        const refused = await this.repartition(tx, destination, partitions);
        if (refused) return { other, refused };
      }
      await tx.query(this.q.createPartitions, [destination, partitions]);
      return undefined;
    });
  }

  /** Reads the schema's outbox identity, which every message id carries from now on (migration 0031). */
  async loadIdentity(schema: string): Promise<void> {
    const [row] = await rows<{ id: string }>(this.db, this.q.identity);
    this.messagePrefix = `${schema}:${row!.id}:`;
  }

  /**
   * Changes a destination's partition count, when no relay holds one of its
   * partitions and no message waits; otherwise says why it cannot.
   */
  private async repartition(tx: Queryable, destination: string, partitions: number): Promise<string | undefined> {
    const [state] = await rows<{
      held: number;
      waiting: number;
      txid: string | null;
      id: string | null;
      published: string;
      published_at: Date | null;
    }>(tx, this.q.repartitionCheck, [destination]);
    if (state!.held > 0) return `a relay holds ${state!.held} of its partitions`;
    if (state!.waiting > 0) return `${state!.waiting} of its messages are not published yet`;
    await tx.query(this.q.dropPartitions, [destination]);
    const { txid, id, published, published_at: publishedAt } = state!;
    await tx.query(this.q.createPartitionsAt, [destination, partitions, txid ?? '0', id ?? '0', published, publishedAt]);
    return undefined;
  }

  /**
   * The watermark when this holder has (or now took) the lease, else undefined;
   * and the other partition count the destination is relayed with now, if it is.
   */
  async acquire(
    destination: string,
    partition: number,
    partitions: number,
    holder: string,
    leaseMs: number,
  ): Promise<{ watermark: Position | undefined; heldMs: number; other: number | null }> {
    const { rows } = await this.db.query<{
      txid: string | null;
      id: string | null;
      held_ms: number | null;
      other: number | null;
    }>(this.q.acquire, [destination, partition, holder, leaseMs, partitions]);
    const row = rows[0]!;
    const watermark = row.txid === null ? undefined : { txid: String(row.txid), id: String(row.id) };
    return { watermark, heldMs: Number(row.held_ms ?? 0), other: row.other };
  }

  async resign(destination: string, partition: number, holder: string): Promise<void> {
    await this.db.query(this.q.resign, [destination, partition, holder]);
  }

  async fetchWindow(
    destination: string,
    after: Position,
    partitions: number,
    partition: number,
    size: number,
    schema: string,
  ): Promise<Window> {
    const { rows } = await this.db.query<WindowRow>(
      this.q.fetchWindow,
      [destination, after.txid, after.id, partitions, partition, size, this.cleanupTxid, WINDOW_BYTES],
      this.prepared ? preparedName('outbox-window', schema) : undefined,
    );
    const messages: RelayMessage[] = [];
    const positions: Position[] = [];
    let end: Position | undefined;
    for (const r of rows) {
      const position = { txid: String(r.txid), id: String(r.id) };
      if (r.marker) {
        end = position;
        continue;
      }
      positions.push(position);
      messages.push({
        id: position.id,
        destination,
        key: r.key,
        headers: r.headers,
        payload: r.payload!,
        createdAt: r.created_at!,
        messageId: `${this.messagePrefix}${position.id}`,
      });
    }
    return { messages, positions, end };
  }

  async beyondHorizon(destination: string, after: Position): Promise<boolean> {
    const { rows } = await this.db.query<{ waiting: boolean }>(this.q.beyondHorizon, [destination, after.txid, after.id]);
    return rows[0]?.waiting === true;
  }

  /** Moves the watermark; false when this holder no longer holds the lease. */
  async advance(
    destination: string,
    partition: number,
    holder: string,
    to: Position,
    published: number,
    leaseMs: number,
    db: Queryable = this.db,
  ): Promise<number | undefined> {
    const { rows } = await db.query(this.q.advance, [destination, partition, holder, to.txid, to.id, published, leaseMs]);
    return rows.length > 0 ? Number((rows[0] as { held_ms: number }).held_ms) : undefined;
  }

  async recordFailure(destination: string, id: string, error: string): Promise<number> {
    const { rows } = await this.db.query<{ attempts: number }>(this.q.recordFailure, [id, destination, error.slice(0, 2000)]);
    return rows[0]!.attempts;
  }

  async clearFailures(destination: string, ids: string[]): Promise<void> {
    await this.db.query(this.q.clearFailures, [destination, ids]);
  }

  /**
   * Moves the message to the dead letters and the watermark past it, in one
   * transaction; the lease's time from the statement's arrival (see advance), or
   * undefined when the lease was lost.
   */
  async deadLetter(
    destination: string,
    partition: number,
    holder: string,
    at: Position,
    published: number,
    leaseMs: number,
  ): Promise<number | undefined> {
    return this.db
      .transaction(async (tx) => {
        await tx.query(this.q.deadLetter, [at.id, destination, at.txid]);
        const heldMs = await this.advance(destination, partition, holder, at, published, leaseMs, tx);
        // Without the lease the move is rolled back: the holder decides.
        if (heldMs === undefined) throw new LeaseLost();
        return heldMs;
      })
      .catch((err: unknown) => {
        if (err instanceof LeaseLost) return undefined;
        throw err;
      });
  }

  async vacuum(): Promise<void> {
    await this.db.query(this.q.vacuum);
  }

  /**
   * Deletes a chunk of published messages in a transaction that first takes its
   * txid and keeps it in `cleanupTxid` until it ends, so that this process's
   * windows do not wait for it. One at a time (the clean-up loop's passes never overlap).
   */
  async deletePublished(destination: string, chunk: number): Promise<number> {
    return this.db.transaction(async (tx) => {
      const [own] = await rows<{ txid: string }>(tx, this.q.currentTxid);
      this.cleanupTxid = own!.txid;
      try {
        const [gone] = await rows<{ deleted: number }>(tx, this.q.deletePublished, [destination, chunk]);
        return gone?.deleted ?? 0;
      } finally {
        // Before COMMIT: a window read in between waits for the deletion, as all did before.
        this.cleanupTxid = null;
      }
    });
  }
}

class LeaseLost extends Error {}
