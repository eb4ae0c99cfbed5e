import { channelFor } from '../db/identifiers.js';
import type { Driver } from '../db/driver.js';
import { hasConnection, resolveDriverName } from '../db/connection.js';
import { openDriver } from '../db/drivers/open.js';
import { outboxStatements } from '../db/statements/outbox.js';
import { ConfigError, isNotMigrated, wrapDatabaseError } from '../errors.js';
import { Loop } from '../lifecycle/loop.js';
import { Notifier } from '../notify/listener.js';
import { outboxLag, type OutboxLag } from './lag.js';
import { PartitionRelay, type LeaseRoom } from './partition-relay.js';
import type { BrokerPublisher } from './publishers/publisher.js';
import { RelayEvents, type PartitionInfo } from './relay-events.js';
import { resolveRelayOptions, type OutboxRelayOptions, type ResolvedRelayOptions } from './relay-options.js';
import { RelayStore } from './relay-store.js';

/** How long stop() lets statements in flight finish before it cuts them (see stop). */
const STOP_GRACE_MS = 5_000;
/** The channel the outbox trigger (migration 0015) notifies, with the destination as payload. */
export function outboxChannelFor(schema: string): string {
  return `${channelFor(schema)}:out`;
}

/**
 * Publishes committed outbox messages to a broker, in commit order per key. Run
 * one or several (processes or hosts): each partition of each destination has one
 * active relay, taken over by another within `leaseMs` when its holder dies.
 *
 * @example
 *   const relay = new OutboxRelay({
 *     connectionString, destinations: ['orders.paid'], partitions: 4,
 *     publisher: natsPublisher({ servers: 'nats://127.0.0.1:4222' }),
 *   });
 *   relay.events.on('deadLetter', (d) => console.warn('dead letter', d.messageId, d.error.message));
 *   await relay.start();
 *   // ... on shutdown:
 *   await relay.stop();
 */
export class OutboxRelay {
  readonly events = new RelayEvents();
  readonly options: ResolvedRelayOptions;
  private readonly publisher: BrokerPublisher;
  private readonly connection: OutboxRelayOptions;
  private driver: Driver | undefined;
  private relays: PartitionRelay[] = [];
  private cleanups: { destination: string; loop: Loop }[] = [];
  private notifier: Notifier | undefined;
  private started = false;
  private stopped = false;
  /**
   * Keeps Node running from start() to stop(), as a Worker does: every other timer
   * of the relay is unref'd, so an idle `sluice relay` exited (code 13, nothing
   * logged) when a Postgres restart closed its connections (outside review 98).
   */
  private keepAlive: NodeJS.Timeout | undefined;
  /** Destinations whose broker setup was looked at (or is being): see inspect(). */
  private readonly inspected = new Set<string>();

  constructor(options: OutboxRelayOptions) {
    this.options = resolveRelayOptions(options);
    if (!hasConnection(options)) throw new ConfigError('OutboxRelay: give connectionString, pool or sql');
    resolveDriverName(options, 'OutboxRelay');
    this.publisher = options.publisher;
    this.connection = options;
    this.events.on('published', ({ destination }) => this.inspect(destination));
  }

  /**
   * Asks the publisher once per destination, after its first batch is in (the broker
   * answers then), what in the broker's setup weakens a guarantee; said as a
   * 'warning'. Best effort: a question that fails (a user without rights to the
   * JetStream API) is not asked again, lest every batch pay for it.
   */
  private inspect(destination: string): void {
    // Not once stop() began: a question sent after the publisher closed would open a connection again.
    if (!this.publisher.inspect || this.inspected.has(destination) || this.stopped) return;
    this.inspected.add(destination);
    this.publisher.inspect(destination, this.options.leaseMs).then(
      (message) => {
        if (message !== undefined) this.events.emit('warning', { destination, message });
      },
      () => {},
    );
  }

  /** Partitions this relay holds now. */
  get holding(): PartitionInfo[] {
    // A lease that ran out is said lost first, so this list and the events agree.
    for (const r of this.relays) r.checkExpiry();
    return this.relays.filter((r) => r.held).map((r) => ({ destination: r.destination, partition: r.partition }));
  }

  /**
   * Connects, registers the destinations' partitions, and starts relaying.
   * ConfigError when a destination is already relayed with another partition count.
   */
  async start(): Promise<void> {
    // Started again after stop(), it did nothing, silently (outside review 96).
    if (this.stopped) throw new ConfigError('OutboxRelay: start() after stop() (or a failed start); create a new OutboxRelay');
    if (this.started) return;
    // Its client library first: a relay that cannot publish must not take partitions (see BrokerPublisher.prepare).
    await this.publisher.prepare?.();
    if (this.started || this.stopped) return;
    this.started = true;
    this.keepAlive = setInterval(() => {}, 2 ** 30);
    const o = this.options;
    const { connectionString, pool, sql, listenConnectionString } = this.connection;
    const total = o.destinations.reduce((n, d) => n + d.partitions, 0);
    // Two statements per held partition can be in flight (a window read ahead while the watermark moves).
    const max = Math.min(total, o.maxPartitions) * 2 + 2;
    const driver = await openDriver(
      resolveDriverName(this.connection, 'OutboxRelay'),
      { connectionString, pool, sql, listenConnectionString },
      max,
      'sluice-relay',
    ).catch((err: unknown) => {
      this.started = false; // nothing was opened: start() may try again
      clearInterval(this.keepAlive);
      throw wrapDatabaseError(err, 'OutboxRelay');
    });
    if (this.stopped) {
      // stop() came while connecting, and found nothing to close.
      await driver.end();
      return;
    }
    this.driver = driver;
    const store = new RelayStore(driver, outboxStatements(o.schema), o.preparedStatements);
    try {
      await store.loadIdentity(o.schema);
      for (const d of o.destinations) {
        // Another count: taken when it is safe (no relay of the destination runs, nothing waits).
        const refusal = await store.register(d.name, d.partitions);
        if (refusal) {
          throw new ConfigError(
            `OutboxRelay: destination ${d.name} is relayed with ${refusal.other} partitions, not ${d.partitions}, and ` +
              `the count cannot change now: ${refusal.refused}. Use the same count in every relay, or stop them all ` +
              'once everything is published (sluice relay --status: waiting 0) and start them with the new one',
          );
        }
      }
    } catch (err) {
      // stop() called meanwhile ended the pool under this start: it stops quietly.
      if (this.stopped) return;
      await this.stop();
      if (isNotMigrated(err))
        throw new ConfigError(`OutboxRelay: schema ${JSON.stringify(o.schema)} has no outbox; run sluice migrate`, {
          cause: err,
        });
      throw wrapDatabaseError(err, 'OutboxRelay');
    }
    if (this.stopped) return; // stop() came while the destinations were registered
    const room = (): LeaseRoom => {
      const held = this.relays.filter((r) => r.held).length;
      if (held >= o.maxPartitions) return 'full';
      const acquiring = this.relays.filter((r) => r.acquiring && !r.held).length;
      return held + acquiring < o.maxPartitions ? 'free' : 'settling';
    };
    for (const d of o.destinations) {
      for (let p = 0; p < d.partitions; p++) {
        this.relays.push(new PartitionRelay(d.name, p, d.partitions, store, this.publisher, o, this.events, room));
      }
      this.cleanups.push({ destination: d.name, loop: this.cleanupLoop(store, d.name) });
    }
    this.notifier = new Notifier(driver, outboxChannelFor(o.schema), 30_000);
    this.notifier.on('payload', (destination) => {
      for (const r of this.relays) if (r.destination === destination) r.wake();
    });
    // Notifications sent while LISTEN was down are lost: look everywhere.
    this.notifier.on('listening', () => {
      for (const r of this.relays) r.wake();
    });
    this.notifier.on('connectionError', (err) => this.events.reportError(err));
    this.notifier.start();
    for (const r of this.relays) r.start();
    for (const c of this.cleanups) c.loop.start();
  }

  /** The schema whose outbox it relays. */
  get schema(): string {
    return this.options.schema;
  }

  /** How far behind every destination is (read from Postgres). */
  async lag(): Promise<OutboxLag[]> {
    if (!this.driver) throw new ConfigError('OutboxRelay: start() first');
    return outboxLag(this.driver, this.options.schema);
  }

  /** Finishes the batches in flight, gives the leases up, closes the connections and the publisher. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.keepAlive);
    // Statements still waiting STOP_GRACE_MS in are cut: behind a lock on the outbox
    // tables (a VACUUM FULL, a migration) stop() waited as long as the lock, a SIGTERM
    // with it, and then took a lease it gave up at once (outside review 234). As after
    // a crash, what the broker took and no watermark recorded is sent again by the
    // next holder, and the broker's de-duplication drops it.
    const driver = this.driver;
    const cut = setTimeout(() => driver?.abort(new Error('OutboxRelay: stopped')), STOP_GRACE_MS);
    try {
      await Promise.all(this.cleanups.map((c) => c.loop.stop()));
      await Promise.all(this.relays.map((r) => r.stop()));
      await this.notifier?.stop();
      await this.publisher.close();
      await driver?.end();
    } finally {
      clearTimeout(cut);
    }
    this.relays = [];
    this.cleanups = [];
    this.driver = undefined;
  }

  /**
   * Deletes what every partition of a destination has published, in chunks. Run
   * by the holder of partition 0 only, so that one relay deletes per destination.
   */
  private cleanupLoop(store: RelayStore, destination: string): Loop {
    const { cleanupIntervalMs, cleanupChunk, vacuumEvery } = this.options;
    const first = () => this.relays.find((r) => r.destination === destination && r.partition === 0);
    let sinceVacuum = 0;
    return new Loop({
      pass: async (signal) => {
        if (!first()?.held) return;
        let deleted: number;
        do {
          deleted = await store.deletePublished(destination, cleanupChunk);
          sinceVacuum += deleted;
        } while (deleted === cleanupChunk && !signal.aborted);
        if (vacuumEvery > 0 && sinceVacuum >= vacuumEvery) {
          sinceVacuum = 0;
          await store.vacuum();
        }
      },
      intervalMs: cleanupIntervalMs,
      jitter: [0.8, 1.2],
      backoff: this.options.retry,
      onError: (err) => this.events.reportError(err),
    });
  }
}
