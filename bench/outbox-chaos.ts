/**
 * The outbox under faults: N messages (default 100,000) over K keys published
 * by P producers whose transactions overlap on keys (see producer below)
 * while relays are SIGKILLed (and restarted), the broker is SIGKILLed and
 * restarted, and Postgres is restarted. Then every committed message is looked
 * for in the stream:
 *
 *   lost        committed (recorded in the same transaction as the publish) and not in the stream: must be 0;
 *   reordered   a key whose messages are not in their sequence order in the stream: must be 0;
 *   duplicates  a message stored twice; each is explained only if the two copies are
 *               further apart than the stream's de-duplication window.
 *
 *   npm run chaos:outbox -- [messages=100000] [--keys=500] [--producers=4] [--relays=3] [--partitions=4]
 *                           [--window-ms=120000] [--fault-every-ms=4000] [--broker-sigkill]
 *                           [--no-commit-order]
 *
 * --no-commit-order turns migration 0039's ordering at COMMIT off, to show what it
 * prevents: overlapping producers' messages published out of commit order.
 *
 * Runs a private embedded Postgres and a private nats-server (JetStream, its own
 * port and store directory), so it can kill and restart both without touching
 * anything else on the machine. Needs the nats-server binary on PATH.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { connect, consumerOpts, type NatsConnection } from 'nats';
import { migrate, Outbox } from '../src/index.js';
import { freePort, startEmbeddedPostgres } from '../src/dev/embedded-postgres.js';

const args = process.argv.slice(2);
const flag = (name: string, fallback: number) => Number(args.find((a) => a.startsWith(`--${name}=`))?.split('=')[1] ?? fallback);
const total = Number(args.find((a) => /^\d+$/.test(a)) ?? 100_000);
const KEYS = flag('keys', 500);
const RELAYS = flag('relays', 3);
const PARTITIONS = flag('partitions', 4);
const WINDOW_MS = flag('window-ms', 120_000);
const FAULT_EVERY_MS = flag('fault-every-ms', 4000);
const PRODUCERS = flag('producers', 4);
const TX_SIZE = 100;
const RELAY_SCRIPT = fileURLToPath(new URL('../tests/fixtures/outbox-relay-process.ts', import.meta.url));
const STREAM = 'CHAOS';
const schema = 'chaos_outbox';

const log = (line: string) => console.log(`${new Date().toISOString().slice(11, 23)} ${line}`);

// Private Postgres and NATS.
const pgDir = await mkdtemp(join(tmpdir(), 'sluice-chaos-pg-'));
const embedded = await startEmbeddedPostgres({ dataDir: pgDir, persistent: false });
const natsDir = await mkdtemp(join(tmpdir(), 'sluice-chaos-nats-'));
const natsPort = await freePort();
const natsUrl = `nats://127.0.0.1:${natsPort}`;
let natsServer: ChildProcess | undefined;

async function startNats(): Promise<void> {
  natsServer = spawn('nats-server', ['-a', '127.0.0.1', '-p', String(natsPort), '-js', '-sd', natsDir], { stdio: 'ignore' });
  for (let i = 0; i < 200; i++) {
    try {
      const nc = await connect({ servers: natsUrl, reconnect: false });
      await nc.close();
      return;
    } catch {
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  throw new Error('nats-server did not start');
}

// A single JetStream server acks a message before its file store has written it
// out, so SIGKILL can lose the last acked messages: a broker fault, not the
// relay's. The default restart is a clean stop (SIGTERM); --broker-sigkill kills it.
const BROKER_SIGNAL = args.includes('--broker-sigkill') ? 'SIGKILL' : 'SIGTERM';

function killNats(signal: NodeJS.Signals = BROKER_SIGNAL): Promise<void> {
  const server = natsServer!;
  if (server.exitCode !== null || server.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    server.once('exit', () => resolve());
    server.kill(signal);
  });
}

log(`Postgres up at ${embedded.url}`);
await startNats();
log(`nats-server up at ${natsUrl}`);
await migrate({ connectionString: embedded.url, schema });
const pool = new pg.Pool({ connectionString: embedded.url, max: PRODUCERS + 2 });
pool.on('error', () => {});
await pool.query(`CREATE TABLE ${schema}.chaos_sent (key int, seq int, PRIMARY KEY (key, seq))`);
await pool.query(`CREATE TABLE ${schema}.chaos_keys (key int PRIMARY KEY, seq int NOT NULL)`);
await pool.query(`INSERT INTO ${schema}.chaos_keys SELECT k, -1 FROM generate_series(0, $1::int - 1) k`, [KEYS]);
// The order as it was before migration 0039: by the order in which transactions took their ids.
if (args.includes('--no-commit-order')) await pool.query(`ALTER TABLE ${schema}.outbox DISABLE TRIGGER outbox_commit_order`);
const outbox = new Outbox({ pool, schema });
const control: NatsConnection = await connect({ servers: natsUrl, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
await (
  await control.jetstreamManager()
).streams.add({ name: STREAM, subjects: ['chaos.>'], duplicate_window: WINDOW_MS * 1_000_000 });

// Relays, respawned after a SIGKILL.
const relays: (ChildProcess | undefined)[] = [];
let relaySeq = 0;
function spawnRelay(slot: number): void {
  const child = spawn(process.execPath, ['--import', 'tsx', RELAY_SCRIPT], {
    env: {
      ...process.env,
      DATABASE_URL: embedded.url,
      SLUICE_SCHEMA: schema,
      SLUICE_NATS_URL: natsUrl,
      RELAY_DESTINATIONS: 'events',
      RELAY_PARTITIONS: String(PARTITIONS),
      RELAY_BATCH: '500',
      RELAY_LEASE_MS: '2000',
      RELAY_PREFIX: 'chaos.',
      RELAY_ID: `relay-${slot}-${++relaySeq}`,
    },
    stdio: 'ignore',
  });
  relays[slot] = child;
}
for (let i = 0; i < RELAYS; i++) spawnRelay(i);

// The producers: transactions of 100 messages, each recorded in chaos_sent in
// the same transaction. They overlap on keys: each takes the next number of 100
// consecutive keys (from a random start) under row locks taken in key order, so
// a transaction can take its id, wait for a key another holds, and commit after
// it. A key's numbers are in commit order, which the stream must keep.
let committed = 0;
let handedOut = 0;
let producerRetries = 0;
const listened = new WeakSet<pg.PoolClient>();
async function producer(): Promise<void> {
  while (handedOut < total) {
    const size = Math.min(TX_SIZE, KEYS, total - handedOut);
    handedOut += size;
    const start = Math.floor(Math.random() * KEYS);
    const keys = Array.from({ length: size }, (_, i) => (start + i) % KEYS);
    for (;;) {
      const client = await pool.connect().catch(() => undefined);
      if (!client) {
        producerRetries++;
        await new Promise((r) => setTimeout(r, 200));
        continue;
      }
      // A restart cuts the connection while it is checked out: pg reports it on the client.
      if (!listened.has(client)) {
        client.on('error', () => {});
        listened.add(client);
      }
      let batch: { key: number; seq: number }[] = [];
      try {
        await client.query('BEGIN');
        await client.query(`SELECT FROM ${schema}.chaos_keys WHERE key = ANY($1) ORDER BY key FOR UPDATE`, [keys]);
        batch = (
          await client.query<{ key: number; seq: number }>(
            `UPDATE ${schema}.chaos_keys SET seq = seq + 1 WHERE key = ANY($1) RETURNING key, seq`,
            [keys],
          )
        ).rows;
        await client.query(`INSERT INTO ${schema}.chaos_sent SELECT * FROM unnest($1::int[], $2::int[])`, [
          batch.map((b) => b.key),
          batch.map((b) => b.seq),
        ]);
        await outbox.publishMany(
          batch.map((b) => ({ destination: 'events', key: `k${b.key}`, payload: `${b.key}:${b.seq}` })),
          { tx: client },
        );
        await client.query('COMMIT');
        client.release();
        break;
      } catch (err) {
        client.release(true);
        producerRetries++;
        // A COMMIT cut off by a restart may have committed: chaos_sent says.
        const done =
          batch.length > 0 &&
          (await pool
            .query(`SELECT 1 FROM ${schema}.chaos_sent WHERE key = $1 AND seq = $2`, [batch[0]!.key, batch[0]!.seq])
            .then((r) => r.rows.length > 0)
            .catch(() => false));
        if (done) break;
        if (!/terminat|connect|ECONNRE|shut|closed|timeout/i.test(String((err as Error).message))) throw err;
        await new Promise((r) => setTimeout(r, 200));
      }
    }
    committed += size;
  }
}

async function produce(): Promise<void> {
  await Promise.all(Array.from({ length: PRODUCERS }, producer));
}

// Faults, in turn, until the producer is done.
const faults = { relayKilled: 0, brokerRestarted: 0, postgresRestarted: 0 };
let producing = true;
async function inject(): Promise<void> {
  const kinds = ['relay', 'broker', 'relay', 'postgres'] as const;
  for (let i = 0; producing; i++) {
    await new Promise((r) => setTimeout(r, FAULT_EVERY_MS));
    if (!producing) break;
    const kind = kinds[i % kinds.length]!;
    if (kind === 'relay') {
      const slot = i % RELAYS;
      relays[slot]?.kill('SIGKILL');
      faults.relayKilled++;
      log(`fault: relay ${slot} SIGKILLed (${committed} committed)`);
      setTimeout(() => spawnRelay(slot), 1000);
    } else if (kind === 'broker') {
      await killNats();
      faults.brokerRestarted++;
      log(`fault: nats-server stopped (${BROKER_SIGNAL}), restarting in 1 s (${committed} committed)`);
      await new Promise((r) => setTimeout(r, 1000));
      await startNats();
    } else {
      faults.postgresRestarted++;
      log(`fault: Postgres restart (${committed} committed)`);
      await embedded.restart(() => new Promise((r) => setTimeout(r, 500)));
    }
  }
}

interface Stored {
  payload: string;
  at: number;
}

/** Every message of the stream, in stream order, through an ordered push consumer (works on nats-server 2.9). */
async function readAll(nc: NatsConnection, count: number): Promise<Stored[]> {
  const opts = consumerOpts();
  opts.orderedConsumer();
  opts.deliverAll();
  const sub = await nc.jetstream().subscribe('chaos.>', opts);
  const out: Stored[] = [];
  for await (const m of sub) {
    out.push({ payload: new TextDecoder().decode(m.data), at: m.info.timestampNanos / 1e6 });
    if (out.length >= count) break;
  }
  sub.unsubscribe();
  return out;
}

const started = Date.now();
try {
  const faulting = inject();
  await produce();
  producing = false;
  await faulting;
  log(`produced ${committed} messages (${producerRetries} producer retries); waiting for the relays`);
  const jsm = await control.jetstreamManager();
  const deadline = Date.now() + 300_000;
  let inStream = 0;
  while (Date.now() < deadline) {
    inStream = await jsm.streams
      .info(STREAM)
      .then((i) => i.state.messages)
      .catch(() => inStream);
    if (inStream >= committed) break;
    await new Promise((r) => setTimeout(r, 500));
  }
  const elapsed = (Date.now() - started) / 1000;
  const stored = await readAll(control, inStream);
  const sent = (await pool.query<{ key: number; seq: number }>(`SELECT key, seq FROM ${schema}.chaos_sent`)).rows;
  const firstAt = new Map<string, number>();
  let duplicates = 0;
  let explained = 0;
  for (const m of stored) {
    const seen = firstAt.get(m.payload);
    if (seen === undefined) firstAt.set(m.payload, m.at);
    else {
      duplicates++;
      if (m.at - seen > WINDOW_MS) explained++;
    }
  }
  const lost = sent.filter((s) => !firstAt.has(`${s.key}:${s.seq}`)).length;
  const lastSeq = new Map<string, number>();
  const reorderedKeys = new Set<string>();
  const counted = new Set<string>();
  for (const m of stored) {
    if (counted.has(m.payload)) continue; // a duplicate's second copy is counted above, not as reordering
    counted.add(m.payload);
    const [key, s] = m.payload.split(':');
    if ((lastSeq.get(key!) ?? -1) > Number(s)) reorderedKeys.add(key!);
    lastSeq.set(key!, Number(s));
  }
  log(
    `result: ${sent.length} committed, ${stored.length} in the stream, lost ${lost}, keys reordered ${reorderedKeys.size}, ` +
      `duplicates ${duplicates} (${explained} beyond the ${WINDOW_MS / 1000} s de-duplication window), ` +
      `faults: ${faults.relayKilled} relay SIGKILLs, ${faults.brokerRestarted} broker restarts, ${faults.postgresRestarted} Postgres restarts; ${elapsed.toFixed(0)} s`,
  );
  process.exitCode = lost === 0 && reorderedKeys.size === 0 && duplicates === explained ? 0 : 1;
} finally {
  for (const r of relays) r?.kill('SIGKILL');
  await control.close().catch(() => {});
  await outbox.close();
  await pool.end().catch(() => {});
  await killNats('SIGKILL').catch(() => {});
  await embedded.stop();
  await rm(natsDir, { recursive: true, force: true });
}
