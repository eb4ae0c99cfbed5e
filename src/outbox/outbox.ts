import { hasConnection, resolveDriverName, type DriverConnectionOptions } from '../db/connection.js';
import type { Driver } from '../db/driver.js';
import { lazyDriver, openDriver } from '../db/drivers/open.js';
import { callerTransaction, isPgPool, rows, type Queryable } from '../db/executor.js';
import { warnIfAutocommitted } from '../db/transaction-status.js';
import { outboxStatements, type OutboxStatements } from '../db/statements/outbox.js';
import { ConfigError, ValidationError, wrapDatabaseError } from '../errors.js';
import { checks } from '../validate.js';
import { checkKey, DEFAULT_MAX_MESSAGE_BYTES, encodeMessage, type OutboxPayload, type PublishOptions } from './message.js';

const config = checks(ConfigError);
const input = checks(ValidationError);

export interface OutboxOptions extends DriverConnectionOptions {
  /** Largest payload accepted, in bytes. Default 1 MiB (NATS's default max_payload). */
  maxMessageBytes?: number;
}

export interface PublishCallOptions extends PublishOptions {
  /** Your open transaction: the message commits or rolls back with it (pg client, postgres.js adapter, ...). */
  tx?: Queryable;
}

/** One message of publishMany. */
export interface OutboxMessage extends PublishOptions {
  destination: string;
  payload: OutboxPayload;
}

const OUTBOX_KEYS = new Set(['connectionString', 'pool', 'sql', 'driver', 'schema', 'maxMessageBytes']);
const PUBLISH_KEYS = new Set(['tx', 'key', 'headers']);
const MESSAGE_KEYS = new Set(['destination', 'payload', 'key', 'headers']);
const TX_KEYS = new Set(['tx']);
/** Most keys one lockKeys takes: each is a lock held to the end of the transaction, and the server's lock table is shared. */
const MAX_LOCKED_KEYS = 1_000;

const POOL_SIZE = 10;

/**
 * The transactional outbox: `publish` writes a message in your transaction, and
 * an OutboxRelay (`sluice relay`) publishes it to NATS JetStream or RabbitMQ
 * once that transaction has committed. A rolled-back transaction publishes nothing.
 *
 * @example
 *   const outbox = new Outbox({ connectionString });
 *   await client.query('BEGIN');
 *   await client.query('UPDATE orders SET status = $2 WHERE id = $1', [id, 'paid']);
 *   await outbox.publish('orders.paid', { id }, { tx: client, key: `order-${id}` });
 *   await client.query('COMMIT');
 */
export class Outbox {
  readonly schema: string;
  private readonly queries: OutboxStatements;
  private readonly maxBytes: number;
  private readonly db: Driver | undefined;

  constructor(options: OutboxOptions = {}) {
    config.rejectUnknownKeys(options, OUTBOX_KEYS, 'Outbox');
    this.schema = config.schemaOption(options.schema);
    this.queries = outboxStatements(this.schema);
    this.maxBytes = config.intOption('maxMessageBytes', options.maxMessageBytes, DEFAULT_MAX_MESSAGE_BYTES, 1, 256 * 1024 * 1024);
    if (hasConnection(options)) {
      const name = resolveDriverName(options, 'Outbox');
      const { connectionString, pool, sql } = options;
      this.db = lazyDriver(() => openDriver(name, { connectionString, pool, sql }, POOL_SIZE, 'sluice-outbox'));
    }
  }

  /** Writes one message; returns its id. Throws ValidationError (nothing written) on bad input. */
  async publish(destination: string, payload: OutboxPayload, options: PublishCallOptions = {}): Promise<string> {
    input.rejectUnknownKeys(options, PUBLISH_KEYS, 'publish');
    const m = encodeMessage(destination, payload, options, this.maxBytes);
    const db = this.executor(options.tx, true);
    try {
      // Headers as JSON text, as publishMany sends them: an object reached postgres.js
      // under Drizzle's serialisers as an object it could not send (outside review 212).
      const headers = m.headers ? JSON.stringify(m.headers) : null;
      const [row] = await rows<{ id: string }>(db, this.queries.publishOne, [m.destination, m.key, headers, m.payload]);
      if (options.tx) warnIfAutocommitted(options.tx, 'publish: the message was written');
      return String(row!.id);
    } catch (err) {
      throw wrapDatabaseError(err, 'publish');
    }
  }

  /**
   * Writes many messages in one statement (and so one transaction of their own
   * without `tx`); returns their ids in order. Messages of one key keep the
   * order of the array.
   */
  async publishMany(messages: OutboxMessage[], options: { tx?: Queryable } = {}): Promise<string[]> {
    input.rejectUnknownKeys(options, TX_KEYS, 'publishMany');
    if (!Array.isArray(messages)) throw new ValidationError('publishMany: messages must be an array');
    if (messages.length === 0) return [];
    const encoded = messages.map((message, i) => {
      if (!message || typeof message !== 'object') throw new ValidationError(`publishMany: message ${i} is not an object`);
      input.rejectUnknownKeys(message, MESSAGE_KEYS, `publishMany message ${i}`);
      try {
        return encodeMessage(message.destination, message.payload, message, this.maxBytes);
      } catch (err) {
        if (!(err instanceof ValidationError)) throw err;
        throw new ValidationError(`publishMany: message ${i}: ${err.message.replace(/^publish: /, '')}`, { cause: err });
      }
    });
    const db = this.executor(options.tx, true);
    try {
      const ids = await rows<{ id: string }>(db, this.queries.publishMany, [
        encoded.map((m) => m.destination),
        encoded.map((m) => m.key),
        encoded.map((m) => (m.headers ? JSON.stringify(m.headers) : null)),
        encoded.map((m) => m.payload),
      ]);
      if (options.tx) warnIfAutocommitted(options.tx, 'publishMany: the messages were written');
      return ids.map((r) => String(r.id));
    } catch (err) {
      throw wrapDatabaseError(err, 'publishMany');
    }
  }

  /**
   * Makes the messages of `keys` that your transaction publishes come out in
   * commit order among overlapping producers: takes each key's lock (held until
   * your COMMIT or ROLLBACK), so the next producer of a key starts after this one
   * ends. Call it once per transaction, with every key, in your transaction (`tx`)
   * before anything else: after a write, a row lock or a sequence's nextval() (the
   * transaction may have its id by then), or a second time, it throws a
   * ConfigError and the transaction is aborted. Keys are locked in one order, so
   * producers of the same keys cannot deadlock.
   */
  async lockKeys(keys: string | readonly string[], options: { tx: Queryable }): Promise<void> {
    if (!options?.tx) throw new ConfigError('lockKeys: pass { tx }, your open transaction (the locks last until it ends)');
    config.rejectUnknownKeys(options, TX_KEYS, 'lockKeys');
    // A tx that is no client (true, a number) is refused as enqueue refuses it: isPgPool threw a TypeError (outside review 214).
    if (isPgPool(this.executor(options.tx))) {
      throw new ConfigError(
        'lockKeys: tx is a pool; pass the client of your open transaction (on a pool the locks end with the statement)',
      );
    }
    // Refused as every write refuses it: an adapter over a library's global object
    // or over a transaction that has ended took no lock that lasted (outside review 256).
    const tx = this.executor(options.tx, true);
    const list = typeof keys === 'string' ? [keys] : keys;
    if (!Array.isArray(list)) throw new ValidationError('lockKeys: keys must be a string or an array of strings');
    if (list.length > MAX_LOCKED_KEYS)
      throw new ValidationError(`lockKeys: at most ${MAX_LOCKED_KEYS} keys at once, got ${list.length}`);
    for (const key of list) checkKey(key, 'lockKeys');
    try {
      await tx.query(this.queries.lockKeys, [list]);
    } catch (err) {
      const e = err as { code?: unknown; message?: unknown } | null;
      const message = typeof e?.message === 'string' ? e.message.replace(/^lock_outbox_keys: /, '') : String(err);
      if (e?.code === '55000') throw new ConfigError(`lockKeys: ${message}`, { cause: err });
      if (e?.code === '22023') throw new ValidationError(`lockKeys: ${message}`, { cause: err });
      throw wrapDatabaseError(err, 'lockKeys');
    }
  }

  /** Closes the connections the Outbox opened (a pool or `sql` you gave stays open). */
  async close(): Promise<void> {
    await this.db?.end();
  }

  /** `write`: a publish, which must commit with the caller's data (see callerTransaction). */
  private executor(tx: Queryable | undefined, write = false): Queryable {
    if (tx !== undefined) return callerTransaction(tx, write);
    if (!this.db) throw new ConfigError('this Outbox has no connection: pass { tx } or give connectionString, pool or sql');
    return this.db;
  }
}
