import { afterAll, afterEach, beforeAll } from 'vitest';
import {
  Outbox,
  OutboxRelay,
  type BrokerPublisher,
  type OutboxRelayOptions,
  type PublishBatchOptions,
  type PublishResult,
  type RelayMessage,
} from '../../src/index.js';
import { createTestSchema, type TestDatabase } from './database.js';

/**
 * A broker in memory, for the relay's decisions (order, watermark, retries, dead
 * letters) without a broker process: it keeps what it was sent and de-duplicates
 * by message id as JetStream does (for ever, not within a window). `refuse`
 * decides per message whether it is refused, `down` per batch whether the broker is unreachable.
 */
export class MemoryBroker implements BrokerPublisher {
  readonly name = 'memory';
  readonly stored: RelayMessage[] = [];
  readonly seen = new Set<string>();
  duplicates = 0;
  attempts = new Map<string, number>();
  refuse: (m: RelayMessage) => boolean = () => false;
  /** Asked once per batch: an unreachable broker fails the whole batch. */
  down: () => boolean = () => false;
  /** Called before each message is sent (a stall can be put here). */
  beforeSend: (m: RelayMessage) => void = () => {};
  /** Messages not sent because the relay's lease had run out (PublishBatchOptions.held). */
  notHeld = 0;

  async publish(messages: readonly RelayMessage[], options?: PublishBatchOptions): Promise<PublishResult[]> {
    await Promise.resolve();
    const down = this.down();
    return messages.map((m) => {
      this.beforeSend(m);
      if (options && !options.held()) {
        this.notHeld++;
        return { ok: false, error: new Error('not held'), transient: true };
      }
      this.attempts.set(m.messageId, (this.attempts.get(m.messageId) ?? 0) + 1);
      if (down) return { ok: false, error: new Error('broker unreachable'), transient: true };
      if (this.refuse(m)) return { ok: false, error: new Error(`refused ${m.messageId}`), transient: false };
      if (this.seen.has(m.messageId)) {
        this.duplicates++;
        return { ok: true, duplicate: true };
      }
      this.seen.add(m.messageId);
      this.stored.push(m);
      return { ok: true };
    });
  }

  async close(): Promise<void> {}

  /** The stored payloads (as text) of one key, in the order the broker got them. */
  ofKey(key: string): string[] {
    return this.stored.filter((m) => m.key === key).map((m) => m.payload.toString());
  }
}

/** A message as a relay hands it to a publisher, for publishers tested alone. */
export function relayMessage(): RelayMessage {
  return {
    id: '1',
    destination: 'd',
    key: null,
    headers: null,
    payload: Buffer.from('x'),
    createdAt: new Date(),
    messageId: 'm:1',
  };
}

/** A schema of a test file's own with an Outbox on it: made before its tests, dropped after. */
export function useOutboxSchema(prefix: string): { readonly db: TestDatabase; readonly outbox: Outbox } {
  let made: { db: TestDatabase; outbox: Outbox } | undefined;
  beforeAll(async () => {
    const db = await createTestSchema(prefix);
    made = { db, outbox: new Outbox({ pool: db.pool, schema: db.schema }) };
  });
  afterAll(async () => {
    await made?.outbox.close();
    await made?.db.drop();
  });
  const get = () => {
    if (!made) throw new Error('the schema is made in beforeAll');
    return made;
  };
  return {
    get db() {
      return get().db;
    },
    get outbox() {
      return get().outbox;
    },
  };
}

/**
 * The relay tests' set-up: useOutboxSchema, relays that poll and retry fast, stopped
 * after each test, and a destination of its own per test, so that tests never see
 * each other's messages.
 */
export function useMemoryRelays(prefix: string) {
  const schema = useOutboxSchema(prefix);
  const relays: OutboxRelay[] = [];
  afterEach(async () => {
    await Promise.all(relays.splice(0).map((r) => r.stop()));
  });
  let destinationSeq = 0;
  return {
    /** The file's schema and Outbox, usable at module level: each access reaches the ones beforeAll made. */
    db: late(() => schema.db),
    outbox: late(() => schema.outbox),
    relays,
    freshDestination: () => `test.d${++destinationSeq}`,
    startRelay(publisher: BrokerPublisher, destinations: string[], extra: Partial<OutboxRelayOptions> = {}): OutboxRelay {
      const relay = new OutboxRelay({
        pool: schema.db.pool,
        schema: schema.db.schema,
        publisher,
        destinations,
        pollIntervalMs: 50,
        retry: { minMs: 5, maxMs: 20 },
        cleanupIntervalMs: 50,
        ...extra,
      });
      relays.push(relay);
      return relay;
    },
    /** Rows of `table` (outbox, outbox_failures, ...) for `destination`. */
    count: async (table: string, destination: string): Promise<number> => {
      const { db } = schema;
      const { rows } = await db.pool.query<{ n: string }>(`SELECT count(*) AS n FROM ${db.s}.${table} WHERE destination = $1`, [
        destination,
      ]);
      return Number(rows[0]!.n);
    },
  };
}

/** An object that stands for what `get` returns once it can (made in beforeAll), its methods bound to it. */
function late<T extends object>(get: () => T): T {
  return new Proxy({} as T, {
    get(_, key) {
      const target = get();
      const value: unknown = Reflect.get(target, key);
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
}

/** The id the relay gives outbox row `id` of this schema: `<schema>:<outbox identity>:<id>` (migration 0031). */
export async function messageIdOf(db: TestDatabase, id: string): Promise<string> {
  const { rows } = await db.pool.query<{ id: string }>(`SELECT id::text AS id FROM ${db.s}.outbox_identity`);
  return `${db.schema}:${rows[0]!.id}:${id}`;
}
