import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Outbox } from '../src/index.js';
import { createTestSchema, waitFor, type TestDatabase } from './helpers/database.js';
import { NATS_URL, brokerAvailable, readStream, useNatsStream } from './helpers/brokers.js';
import { spawnWorker, type WorkerProcess } from './helpers/processes.js';

const natsUp = await brokerAvailable('NATS', NATS_URL);
const RELAY_SCRIPT = fileURLToPath(new URL('./fixtures/outbox-relay-process.ts', import.meta.url));

let db: TestDatabase;
const children: WorkerProcess[] = [];

beforeAll(async () => {
  db = await createTestSchema('outbox_procs');
});
afterAll(async () => {
  for (const c of children) if (c.child.exitCode === null && c.child.signalCode === null) c.child.kill('SIGKILL');
  await Promise.all(children.map((c) => c.exited));
  await db.drop();
});

describe.skipIf(!natsUp)('relays in separate processes', () => {
  const stream = useNatsStream('p');

  it('three relays share six partitions; one SIGKILLed mid-batch loses nothing and reorders no key', async () => {
    const env = (id: string) => ({
      DATABASE_URL: db.url,
      SLUICE_SCHEMA: db.schema,
      SLUICE_NATS_URL: NATS_URL,
      RELAY_DESTINATIONS: 'events',
      RELAY_PARTITIONS: '6',
      RELAY_MAX_PARTITIONS: '3',
      RELAY_BATCH: '20',
      RELAY_LEASE_MS: '1000',
      RELAY_PREFIX: `${stream.prefix}.`,
      RELAY_ID: id,
    });
    const relays = await Promise.all(['r1', 'r2', 'r3'].map((id) => spawnWorker(env(id), RELAY_SCRIPT)));
    children.push(...relays);
    const outbox = new Outbox({ pool: db.pool, schema: db.schema });
    const KEYS = 30;
    const ROUNDS = 40;
    const seq = new Array<number>(KEYS).fill(0);
    const round = (r: number) =>
      outbox.publishMany(
        Array.from({ length: 50 }, (_, i) => {
          const k = (r * 7 + i) % KEYS;
          return { destination: 'events', payload: `k${k}:${seq[k]!++}`, key: `k${k}` };
        }),
      );
    try {
      for (let r = 0; r < ROUNDS / 2; r++) await round(r);
      // The victim: a relay that holds partitions and is publishing.
      const victim = await waitFor(
        () => relays.find((c) => (c.output().match(/^published /gm) ?? []).length >= 2),
        'a relay publishing batches',
      );
      victim.child.kill('SIGKILL');
      expect(await victim.exited).toBe('SIGKILL');
      for (let r = ROUNDS / 2; r < ROUNDS; r++) await round(r);
      const total = 50 * ROUNDS;
      const jsm = await stream.nc.jetstreamManager();
      await waitFor(
        async () => (await jsm.streams.info(stream.name)).state.messages >= total,
        `all ${total} messages in the stream`,
      );
      const stored = await readStream(stream.nc, stream.name);
      // JetStream de-duplicates what the killed relay had sent but not recorded.
      expect(stored).toHaveLength(total);
      expect(new Set(stored.map((m) => m.msgId)).size).toBe(total);
      for (let k = 0; k < KEYS; k++) {
        const mine = stored.filter((m) => m.key === `k${k}`).map((m) => m.payload);
        expect(mine).toEqual(mine.map((_, n) => `k${k}:${n}`));
        expect(mine).toHaveLength(seq[k]!);
      }
      // The survivors took the victim's partitions over.
      const { rows } = await db.pool.query(
        `SELECT count(*)::int AS n FROM ${db.s}.outbox_relays WHERE destination = 'events' AND holder IS NOT NULL AND holder <> $1 AND expires_at > now()`,
        [victim === relays[0] ? 'r1' : victim === relays[1] ? 'r2' : 'r3'],
      );
      expect(rows[0].n).toBe(6);
    } finally {
      await outbox.close();
      for (const c of relays) if (c.child.exitCode === null && c.child.signalCode === null) c.child.kill('SIGTERM');
      await Promise.all(relays.map((c) => c.exited));
    }
  });
});
