import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type { DriverConnectionOptions } from '../db/connection.js';
import { ConfigError } from '../errors.js';
import type { BackoffOptions } from '../lifecycle/backoff.js';
import { checks } from '../validate.js';
import { MAX_DESTINATION_LENGTH } from './message.js';
import type { BrokerPublisher } from './publishers/publisher.js';

const config = checks(ConfigError);
const RETRY_KEYS = new Set(['minMs', 'maxMs']);

export interface DestinationOption {
  name: string;
  /** Partitions of this destination (messages spread by key); default: the relay's `partitions`. */
  partitions?: number;
}

export interface OutboxRelayOptions extends DriverConnectionOptions {
  /** Where messages go: natsPublisher(...), rabbitMqPublisher(...), or your own BrokerPublisher. */
  publisher: BrokerPublisher;
  /** The destinations this relay publishes. */
  destinations: (string | DestinationOption)[];
  /**
   * Partitions per destination (default 1). Messages of one key stay in one
   * partition, in order; each partition has one active relay at a time. Every
   * relay of a destination must use the same count.
   */
  partitions?: number;
  /** Most partitions this process holds at once (default: all). Start N processes with maxPartitions = P/N to share the load. */
  maxPartitions?: number;
  /** Rows read per window, and so the largest batch sent to the broker. Default 2000. */
  batchSize?: number;
  /** Poll when no notification came, in ms. Default 1000. */
  pollIntervalMs?: number;
  /** Look again this soon when committed messages wait behind a running transaction, in ms. Default 10. */
  horizonRetryMs?: number;
  /** How long a partition's lease lasts without renewal, in ms. Default 10000. */
  leaseMs?: number;
  /** Refusals of one message before it becomes a dead letter. Default 10. */
  maxAttempts?: number;
  /** Backoff between retries after a failure. Default 200 ms doubling to 30 s; either bound may be given alone. */
  retry?: Partial<BackoffOptions>;
  /** How often published messages are deleted, in ms. Default 1000. */
  cleanupIntervalMs?: number;
  /** Rows deleted per statement. Default 20000. */
  cleanupChunk?: number;
  /**
   * VACUUM the outbox after this many deletions (0: leave it to autovacuum).
   * Default 50000: at tens of thousands of messages a second, autovacuum's
   * one-minute naptime would let the table grow by millions of dead rows between
   * rounds. Needs the relay's role to own the table; without that, set 0.
   */
  vacuumEvery?: number;
  /** This relay's name in the lease rows. Default host:pid:random. */
  relayId?: string;
  /**
   * LISTEN (the wake-ups at COMMIT) on this connection instead of `connectionString`:
   * a direct one to Postgres when `connectionString` goes through a transaction-mode
   * pooler (PgBouncer), where LISTEN does not work and the relay would only poll.
   */
  listenConnectionString?: string;
  /**
   * Default true: the window read is a named prepared statement. `false` behind a
   * transaction-mode pooler that does not keep them (PgBouncer before 1.21, or
   * `max_prepared_statements = 0`).
   */
  preparedStatements?: boolean;
}

export interface ResolvedRelayOptions {
  schema: string;
  destinations: { name: string; partitions: number }[];
  maxPartitions: number;
  batchSize: number;
  pollIntervalMs: number;
  horizonRetryMs: number;
  leaseMs: number;
  maxAttempts: number;
  retry: BackoffOptions;
  cleanupIntervalMs: number;
  cleanupChunk: number;
  vacuumEvery: number;
  relayId: string;
  preparedStatements: boolean;
}

const DESTINATION_KEYS = new Set(['name', 'partitions']);
const KEYS = new Set([
  'connectionString',
  'pool',
  'sql',
  'driver',
  'schema',
  'publisher',
  'destinations',
  'partitions',
  'maxPartitions',
  'batchSize',
  'pollIntervalMs',
  'horizonRetryMs',
  'leaseMs',
  'maxAttempts',
  'retry',
  'cleanupIntervalMs',
  'cleanupChunk',
  'vacuumEvery',
  'relayId',
  'listenConnectionString',
  'preparedStatements',
]);

/** Checks an OutboxRelay's options (ConfigError naming the bad one) and fills in the defaults. */
export function resolveRelayOptions(options: OutboxRelayOptions): ResolvedRelayOptions {
  if (!options || typeof options !== 'object') throw new ConfigError('OutboxRelay: options object required');
  config.rejectUnknownKeys(options, KEYS, 'OutboxRelay');
  const p = options.publisher as Partial<BrokerPublisher> | undefined;
  if (!p || typeof p.publish !== 'function' || typeof p.close !== 'function') {
    throw new ConfigError('OutboxRelay: publisher must be a BrokerPublisher (natsPublisher(), rabbitMqPublisher())');
  }
  if (!Array.isArray(options.destinations) || options.destinations.length === 0) {
    throw new ConfigError('OutboxRelay: destinations must be a non-empty array');
  }
  const partitions = config.intOption('partitions', options.partitions, 1, 1, 1024);
  const seen = new Set<string>();
  const destinations = options.destinations.map((d) => {
    // A misspelt key ({ partitons: 2 }) ran with the default (outside review 173).
    if (typeof d === 'object' && d !== null) config.rejectUnknownKeys(d, DESTINATION_KEYS, 'OutboxRelay: destination');
    const { name, partitions: n } = typeof d === 'string' ? { name: d, partitions: undefined } : (d ?? ({} as DestinationOption));
    if (typeof name !== 'string' || name.length === 0 || name.length > MAX_DESTINATION_LENGTH) {
      throw new ConfigError(`OutboxRelay: destination must be a string of 1 to ${MAX_DESTINATION_LENGTH} characters`);
    }
    if (seen.has(name)) throw new ConfigError(`OutboxRelay: destination ${name} is listed twice`);
    // Every message for it would be a dead letter (outside review 74: 'orders.*' started, as if a wildcard).
    const refused = p.refuses?.(name);
    if (refused) throw new ConfigError(`OutboxRelay: destination ${name} cannot be published: ${refused}`);
    seen.add(name);
    return { name, partitions: config.intOption(`partitions of ${name}`, n, partitions, 1, 1024) };
  });
  const total = destinations.reduce((sum, d) => sum + d.partitions, 0);
  // Each bound defaults on its own: `{ minMs: 100 }` left maxMs undefined, the
  // backoff NaN, and the relay never retried after a broker error (outside review 74).
  const retryIn: Partial<BackoffOptions> = options.retry ?? {};
  if (typeof retryIn !== 'object' || retryIn === null) throw new ConfigError('OutboxRelay: retry must be { minMs, maxMs }');
  config.rejectUnknownKeys(retryIn, RETRY_KEYS, 'OutboxRelay: retry');
  // A maxMs alone below the default minMs brings minMs down with it.
  const maxGiven = typeof retryIn.maxMs === 'number' && retryIn.maxMs >= 1 ? retryIn.maxMs : undefined;
  const minMs = config.intOption('retry.minMs', retryIn.minMs, Math.min(200, maxGiven ?? 200), 1, 3_600_000);
  const retry = { minMs, maxMs: config.intOption('retry.maxMs', retryIn.maxMs, Math.max(minMs, 30_000), minMs, 3_600_000) };
  const leaseMs = config.intOption('leaseMs', options.leaseMs, 10_000, 500, 3_600_000);
  if (options.relayId !== undefined) config.checkName('relayId', options.relayId);
  if (options.listenConnectionString !== undefined && typeof options.listenConnectionString !== 'string') {
    throw new ConfigError('OutboxRelay: listenConnectionString must be a string');
  }
  return {
    schema: config.schemaOption(options.schema),
    destinations,
    maxPartitions: config.intOption('maxPartitions', options.maxPartitions, total, 1, 1_000_000),
    batchSize: config.intOption('batchSize', options.batchSize, 2000, 1, 100_000),
    pollIntervalMs: config.intOption('pollIntervalMs', options.pollIntervalMs, 1000, 10, 3_600_000),
    horizonRetryMs: config.intOption('horizonRetryMs', options.horizonRetryMs, 10, 1, 60_000),
    leaseMs,
    maxAttempts: config.intOption('maxAttempts', options.maxAttempts, 10, 1, 1000),
    retry,
    cleanupIntervalMs: config.intOption('cleanupIntervalMs', options.cleanupIntervalMs, 1000, 10, 3_600_000),
    cleanupChunk: config.intOption('cleanupChunk', options.cleanupChunk, 20_000, 1, 1_000_000),
    vacuumEvery: config.intOption('vacuumEvery', options.vacuumEvery, 50_000, 0, 1_000_000_000),
    relayId: options.relayId ?? `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`,
    preparedStatements: config.boolOption('preparedStatements', options.preparedStatements, true),
  };
}
