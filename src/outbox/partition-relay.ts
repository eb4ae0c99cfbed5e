import { ConfigError } from '../errors.js';
import { Loop } from '../lifecycle/loop.js';
import { PartitionLease } from './partition-lease.js';
import type { BrokerPublisher, PublishResult, RelayMessage } from './publishers/publisher.js';
import type { ResolvedRelayOptions } from './relay-options.js';
import type { RelayEvents } from './relay-events.js';
import { START, type Position, type RelayStore, type Window } from './relay-store.js';
import { horizonDelay, leaseKeepingBackoff } from './relay-pacing.js';
import { unlessStopped } from '../lifecycle/unless-stopped.js';

/**
 * What a pass found: the next pass comes at once (more to do); soon (horizon: rows
 * not yet final; settling: this process's room for leases is filled by acquires
 * still in flight, which may fail); after the poll interval (idle); or after half
 * a lease (standby: another relay holds it, or this process holds maxPartitions).
 */
type PassOutcome = 'more' | 'horizon' | 'idle' | 'standby' | 'settling';

/** Whether this process may take one more partition: 'settling' while acquires in flight fill its room (they may fail). */
export type LeaseRoom = 'free' | 'full' | 'settling';

/** The wait before a partition looks again for room that acquires in flight may leave. */
const SETTLING_MS = 100;

/**
 * How long a stop waits for the acks of the batch out before giving it up. Given up
 * at once, every stop under load (a rolling deploy) sent a batch again: JetStream
 * drops it, RabbitMQ consumers got it twice.
 */
const ACK_GRACE_MS = 2_000;

/** A message refused by the broker, or a broker that cannot be reached: the pass fails and the loop backs off. */
export class RelayPublishError extends Error {
  constructor(
    message: string,
    readonly transient: boolean,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/**
 * The relay of one partition of one destination. It holds the partition's lease
 * (or waits for it), then walks the destination's committed messages from the
 * watermark, publishes this partition's in batches, and moves the watermark once
 * per batch. The next window is read while the broker acks the current one.
 */
export class PartitionRelay {
  private readonly lease: PartitionLease;
  /** An acquire is in flight: counts against maxPartitions like a held lease. */
  acquiring = false;
  private watermark: Position = START;
  /**
   * Messages past the watermark that the broker has acked, held back from it by a
   * message before them that is being retried: not sent again (see publishNew).
   */
  private readonly ahead = new Set<string>();
  /** Ids with a failure row, cleared once they are published. */
  private failing = new Set<string>();
  private readonly loop: Loop<PassOutcome>;
  /** The other partition count last reported (see reportLayout). */
  private reportedLayout: number | null = null;
  /** Passes in a row that ended behind the horizon: each waits twice as long as the last (see delayAfter). */
  private behindHorizon = 0;

  constructor(
    readonly destination: string,
    readonly partition: number,
    private readonly partitions: number,
    private readonly store: RelayStore,
    private readonly publisher: BrokerPublisher,
    private readonly options: ResolvedRelayOptions,
    private readonly events: RelayEvents,
    /** Whether this process may take one more partition (maxPartitions). */
    private readonly room: () => LeaseRoom,
  ) {
    // Whoever holds the lease next sends what is ahead again (as after a crash).
    this.lease = new PartitionLease(destination, partition, events, () => this.ahead.clear());
    this.loop = new Loop<PassOutcome>({
      pass: (signal) => this.pass(signal),
      intervalMs: (outcome) => this.delayAfter(outcome),
      jitter: [0.8, 1.2],
      backoff: leaseKeepingBackoff(options),
      onError: (err) => this.failed(err),
    });
  }

  /** True while the lease is held (by the time of its last renewal). */
  get held(): boolean {
    return this.lease.held;
  }

  /** See PartitionLease.checkExpiry. */
  checkExpiry(): void {
    this.lease.checkExpiry();
  }

  start(): void {
    this.loop.start();
    void this.loop.trigger();
  }

  /**
   * New messages were committed: look now (if this relay holds the partition),
   * unless the broker is failing: a wake must not cut the backoff short, or a
   * broker that is down gets a retry per committed message (review 46: ~150 a second).
   */
  wake(): void {
    if (this.held && !this.loop.backingOff) this.loop.runSoon(0);
  }

  /** Stops after the batch in flight; gives the lease up so another relay takes over at once. */
  async stop(): Promise<void> {
    await this.loop.stop();
    if (this.lease.taken) {
      // Said, so that `holding` and the events agree to the end (outside review 99).
      this.lease.lost('stopped');
      await this.store.resign(this.destination, this.partition, this.options.relayId).catch(() => {});
    }
  }

  private delayAfter(outcome: PassOutcome | undefined): number {
    this.behindHorizon = outcome === 'horizon' ? this.behindHorizon + 1 : 0;
    if (outcome === 'more') return 0;
    if (outcome === 'horizon') return horizonDelay(this.behindHorizon, this.options);
    if (outcome === 'standby') return this.options.leaseMs / 2;
    // Relays started together left free partitions unheld for ~5 s: the siblings
    // whose acquires were in flight (and failed, another relay held those) had
    // filled the room, and the rest waited half a lease (outside review 96).
    if (outcome === 'settling') return SETTLING_MS;
    // An idle pass also renews the lease: come back well before it expires.
    return Math.min(this.options.pollIntervalMs, this.options.leaseMs / 3);
  }

  private async pass(signal: AbortSignal): Promise<PassOutcome> {
    const lease = await this.holdLease();
    if (lease !== 'held') return lease;
    let window = await this.fetch(this.watermark);
    while (window.end && !signal.aborted) {
      // The next window, read while the broker acks this one; dropped when this one fails.
      const end = window.end;
      const next = this.fetch(end);
      next.catch(() => {});
      const sent = window.messages.length > 0 ? this.keepingLease(this.publishNew(window.messages)) : Promise.resolve([]);
      const results = await unlessStopped(sent, signal, ACK_GRACE_MS);
      // Stopped with acks still out after the grace (a silent broker would hold stop()
      // for the ack timeout): the batch stays unrecorded, to be published again by
      // whichever relay goes on (JetStream drops it as a duplicate).
      if (!results) return 'idle';
      if (!(await this.record(window, results, end))) return 'standby';
      if (this.ahead.size > 0) for (const m of window.messages) this.ahead.delete(m.id);
      if (this.failing.size > 0) await this.clearFailures(window);
      if (!this.held) return 'standby';
      window = await next;
    }
    if (signal.aborted) return 'idle';
    const behindHorizon = await this.store.beyondHorizon(this.destination, this.watermark);
    this.events.emit('caughtUp', { destination: this.destination, partition: this.partition, behindHorizon });
    return behindHorizon ? 'horizon' : 'idle';
  }

  /**
   * Publishes the messages the broker does not have yet; those in `ahead` count as
   * published without being sent. A refused message is retried with the batch
   * behind it, and that batch went to the broker again with every try (outside
   * reviews 98 and 99: 10 deliveries each to RabbitMQ at maxAttempts 10, and more
   * with each further refusal).
   */
  private async publishNew(messages: readonly RelayMessage[]): Promise<PublishResult[]> {
    const options = { held: () => this.held };
    if (this.ahead.size === 0) return this.publisher.publish(messages, options);
    // Read before the publish: a lease lost meanwhile clears `ahead`, and the results
    // matched to the messages by it were shifted (outside review 152: a TypeError).
    const had = messages.map((m) => this.ahead.has(m.id));
    const fresh = messages.filter((_, i) => !had[i]);
    const sent = fresh.length > 0 ? await this.publisher.publish(fresh, options) : [];
    let next = 0;
    return messages.map((_, i): PublishResult => (had[i] ? { ok: true } : sent[next++]!));
  }

  /**
   * `work`'s value; meanwhile the lease is renewed every third of it. Renewed only
   * when a batch was recorded, a batch the broker took longer than a lease to
   * confirm (50,000 messages, a broker slow to confirm, a refused message's
   * suspects sent one at a time) let the lease run out while it was out, and
   * another relay could take the partition and send the batch again (outside review 189).
   */
  private async keepingLease<T>(work: Promise<T>): Promise<T> {
    const { leaseMs } = this.options;
    let renewal: Promise<void> | undefined;
    // Renewed once less than two thirds are left, looked at every sixth: at once when
    // the window's read used much of it. Renewed only every third from the start, a
    // lease with half left at the pass's start ran out before the first renewal
    // (outside review 197: lost under a throttled broker, one relay alone).
    const renew = () => {
      if (this.lease.leftMs < (2 * leaseMs) / 3) renewal ??= this.renewWhileOut().finally(() => (renewal = undefined));
    };
    renew();
    const timer = setInterval(renew, leaseMs / 6);
    try {
      return await work;
    } finally {
      clearInterval(timer);
      // A renewal still out could answer after record() moved the watermark, and read as lost.
      await renewal;
    }
  }

  /** Renews a lease still held; a watermark that moved under it means another relay held it meanwhile. */
  private async renewWhileOut(): Promise<void> {
    if (!this.held) return;
    const { leaseMs, relayId } = this.options;
    const sentAt = Date.now();
    try {
      const { watermark, heldMs } = await this.store.acquire(this.destination, this.partition, this.partitions, relayId, leaseMs);
      if (!watermark || watermark.txid !== this.watermark.txid || watermark.id !== this.watermark.id) this.lease.lost('taken');
      else if (this.lease.taken) this.lease.renewed(sentAt, heldMs);
    } catch {
      // Postgres unreachable: the lease is said lost when it runs out (checkExpiry), as between batches.
    }
  }

  private fetch(after: Position): Promise<Window> {
    const { batchSize } = this.options;
    return this.store.fetchWindow(this.destination, after, this.partitions, this.partition, batchSize, this.options.schema);
  }

  /** Takes or renews the lease when it is not fresh; 'standby' when another relay holds it or there is no room. */
  private async holdLease(): Promise<'held' | 'standby' | 'settling'> {
    const { leaseMs, relayId } = this.options;
    if (this.lease.leftMs > leaseMs / 2) return 'held';
    this.lease.checkExpiry();
    if (!this.held) {
      const room = this.room();
      if (room !== 'free') return room === 'full' ? 'standby' : 'settling';
    }
    const sentAt = Date.now();
    this.acquiring = true;
    const { watermark, heldMs, other } = await this.store
      .acquire(this.destination, this.partition, this.partitions, relayId, leaseMs)
      .finally(() => (this.acquiring = false));
    this.reportLayout(other);
    if (!watermark) {
      this.lease.lost('taken');
      return 'standby';
    }
    this.lease.renewed(sentAt, heldMs);
    // Only the holder moves the watermark, so the row's is the truth: equal to
    // ours while we held it throughout, newer when another relay held it meanwhile.
    this.watermark = watermark;
    return 'held';
  }

  private async advance(to: Position, published: number): Promise<boolean> {
    const sentAt = Date.now();
    const heldMs = await this.store.advance(
      this.destination,
      this.partition,
      this.options.relayId,
      to,
      published,
      this.options.leaseMs,
    );
    if (heldMs === undefined) {
      this.lease.lost('taken');
      return false;
    }
    this.lease.renewed(sentAt, heldMs);
    this.watermark = to;
    return true;
  }

  /**
   * A relay started since with another partition count changed the destination's
   * (allowed while no lease was held and nothing waited): this one can never take
   * a partition again, and said nothing (outside review 74). Said once per change.
   */
  private reportLayout(other: number | null): void {
    if (other !== null && other !== this.reportedLayout) {
      this.events.emit(
        'error',
        new ConfigError(
          `OutboxRelay: destination ${this.destination} is now relayed with ${other} partitions, not ${this.partitions}: ` +
            'this relay takes none of them; restart it with the same count as the others',
        ),
      );
    }
    this.reportedLayout = other;
  }

  /**
   * Records what the broker took, in order: the watermark moves over each run of
   * accepted messages, and a refused one is retried (the pass throws) or becomes a
   * dead letter. After a dead letter the messages the broker took behind it are
   * recorded too; while it is retried they are kept in `ahead`. Either way they are
   * not sent again (outside review 96: each refusal mid-batch sent the rest of the
   * batch to RabbitMQ once more, 9 messages delivered 34 times). False when the
   * lease was lost.
   */
  private async record(window: Window, results: readonly PublishResult[], end: Position): Promise<boolean> {
    let from = 0; // the first message not recorded yet
    for (let i = 0; i < results.length; i++) {
      const result = results[i]!;
      if (result.ok) continue;
      if (i > from && !(await this.recordPublished(window, from, i, window.positions[i - 1]!))) return false;
      // Retried (the call throws): what the broker took behind it stays there.
      for (let j = i + 1; j < results.length; j++) if (results[j]!.ok) this.ahead.add(window.messages[j]!.id);
      if (!(await this.refused(window, i, result))) return false;
      from = i + 1;
    }
    return this.recordPublished(window, from, results.length, end);
  }

  /** Moves the watermark to `to` over the window's messages [first, last), which the broker has. */
  private async recordPublished(window: Window, first: number, last: number, to: Position): Promise<boolean> {
    if (!(await this.advance(to, last - first))) return false;
    if (last > first) {
      const all = first === 0 && last === window.messages.length;
      const messages = all ? window.messages : window.messages.slice(first, last);
      this.events.emit('published', { destination: this.destination, partition: this.partition, count: last - first, messages });
    }
    return true;
  }

  /**
   * A message the broker did not take, the ones before it recorded. It is retried
   * after a backoff (the pass throws); after maxAttempts refusals (at once when no
   * try can send it) it becomes a dead letter, so its key goes on, and true is
   * returned. False when the lease was lost.
   */
  private async refused(window: Window, index: number, result: Extract<PublishResult, { ok: false }>): Promise<boolean> {
    const message = window.messages[index]!;
    const at = window.positions[index]!;
    const info = { destination: this.destination, partition: this.partition, messageId: message.messageId, error: result.error };
    if (result.transient) {
      this.events.emit('failure', { ...info, transient: true, attempts: 0 });
      throw new RelayPublishError(`${this.publisher.name}: ${result.error.message}`, true, { cause: result.error });
    }
    const attempts = await this.store.recordFailure(this.destination, message.id, result.error.message);
    this.failing.add(message.id);
    this.events.emit('failure', { ...info, transient: false, attempts });
    if (attempts < this.options.maxAttempts && !result.unsendable) {
      throw new RelayPublishError(
        `${this.publisher.name} refused message ${message.messageId} (try ${attempts} of ${this.options.maxAttempts}): ${result.error.message}`,
        false,
        { cause: result.error },
      );
    }
    const sentAt = Date.now();
    const { relayId, leaseMs } = this.options;
    const heldMs = await this.store.deadLetter(this.destination, this.partition, relayId, at, 0, leaseMs);
    if (heldMs === undefined) {
      this.lease.lost('taken');
      return false;
    }
    this.lease.renewed(sentAt, heldMs);
    this.watermark = at;
    this.failing.delete(message.id);
    this.events.emit('deadLetter', { ...info, attempts });
    return true;
  }

  private async clearFailures(window: Window): Promise<void> {
    const published = window.messages.map((m) => m.id).filter((id) => this.failing.has(id));
    if (published.length === 0) return;
    await this.store.clearFailures(this.destination, published);
    for (const id of published) this.failing.delete(id);
  }

  private failed(err: unknown): void {
    this.lease.checkExpiry();
    // A refused message was already reported as a 'failure' event.
    if (err instanceof RelayPublishError) return;
    this.events.reportError(err);
  }
}
