/**
 * The outbox relay against NATS JetStream, and the cost of publishing:
 *
 *   throughput  a backlog of N messages (default 200,000) relayed to JetStream, and
 *               beside it the rate at which this same process publishes the same
 *               messages straight to JetStream with async acks (windows of the
 *               relay's batch size, the same msgID and key header), in the same run;
 *   latency     1,000 messages/s, each published in a transaction of its own, for
 *               W seconds of warm-up (default 2, not counted: connections opening,
 *               the JIT) and then S seconds (default 10): from the COMMIT having
 *               returned to the relay having the broker's ack and its watermark
 *               recorded. The relay has its own connections, as `sluice relay` in
 *               a process of its own would (sharing the publishers' pool, its reads
 *               queue behind their bursts). Printed with this process's event-loop
 *               delay and the load average: a stall there delays every message;
 *   publish     the cost of publishing, keyed messages (put in commit order at COMMIT,
 *               migration 0039) beside messages without a key (no such step), in
 *               the same run, 3 rounds each, medians: bulk (--publish-bulk=50,000 in
 *               publishMany calls of 1,000) and single (--publish-single=5,000, one
 *               message per transaction from 10 callers); and the COMMIT of a
 *               bulk publish that must move behind one that committed first;
 *   size        M messages (default 1,000,000) published and relayed with a steady
 *               backlog; the outbox table's size every M/10 messages (or
 *               --size-every), printed as it is taken; --size-minutes stops
 *               adding messages after that long and reports the count reached.
 *
 *   npm run bench:outbox -- [backlog=200000] [--latency-seconds=10] [--warmup-seconds=2] [--size=1000000]
 *                           [--size-every=n] [--size-minutes=m]
 *                           [--batch=2000] [--only=throughput,latency,size,publish]
 *                           [--publish-bulk=50000] [--publish-single=5000] [--memory-streams]
 *
 * --memory-streams keeps the benchmark's streams in the NATS server's memory instead of
 * files, to show how much of a limit is the broker's disk path rather than the relay's.
 * Without DATABASE_URL it starts a private embedded Postgres (fsync off), so other
 * sessions' long transactions on a shared server (which hold the relay's horizon
 * back, by design) do not decide the result. NATS: SLUICE_NATS_URL or 127.0.0.1:4222.
 * Works in its own schema and streams, removed at the end.
 */
import { mkdtemp } from 'node:fs/promises';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import pg from 'pg';
import { connect, headers as natsHeaders, StorageType } from 'nats';
import { migrate, natsPublisher, Outbox, OutboxRelay } from '../src/index.js';
import { startEmbeddedPostgres } from '../src/dev/embedded-postgres.js';
import { quoteSchema } from '../src/db/identifiers.js';
import { distribution, rate } from './lib/stats.js';

const args = process.argv.slice(2);
const flag = (name: string, fallback: number) => Number(args.find((a) => a.startsWith(`--${name}=`))?.split('=')[1] ?? fallback);
const backlog = Number(args.find((a) => /^\d+$/.test(a)) ?? 200_000);
const latencySeconds = flag('latency-seconds', 10);
const warmupSeconds = flag('warmup-seconds', 2);
const sizeTotal = flag('size', 1_000_000);
// The size run stops adding messages after this many minutes (0: no limit) and reports how far it got.
const sizeMinutes = flag('size-minutes', 0);
const sizeEvery = flag('size-every', 0);
const batch = flag('batch', 2000);
const publishBulk = flag('publish-bulk', 50_000);
const publishSingle = flag('publish-single', 5_000);
const only = new Set((args.find((a) => a.startsWith('--only='))?.split('=')[1] ?? 'throughput,latency,size,publish').split(','));
const memoryStreams = args.includes('--memory-streams');
const NATS_URL = process.env.SLUICE_NATS_URL ?? 'nats://127.0.0.1:4222';
const KEYS = 1000;
const CHUNK = 5000;

const embedded = process.env.DATABASE_URL
  ? undefined
  : await startEmbeddedPostgres({
      dataDir: await mkdtemp(join(tmpdir(), 'sluice-outbox-pg-')),
      persistent: false,
      settings: { fsync: 'off', synchronous_commit: 'off', full_page_writes: 'off' },
    });
const url = process.env.DATABASE_URL ?? embedded!.url;
const schema = `bench_outbox_${process.pid}`;
const s = quoteSchema(schema);
const tag = `b${process.pid}`;
await migrate({ connectionString: url, schema });
const pool = new pg.Pool({ connectionString: url, max: 12 });
// Stopping the embedded server at the end cuts the pool's idle connections.
pool.on('error', () => {});
const outbox = new Outbox({ pool, schema });
const nc = await connect({ servers: NATS_URL });
const jsm = await nc.jetstreamManager();
const streams: string[] = [];

async function stream(name: string, limits: { max_msgs?: number } = {}): Promise<string> {
  const full = `${name}_${tag}`.toUpperCase();
  const storage = memoryStreams ? StorageType.Memory : StorageType.File;
  await jsm.streams.add({ name: full, subjects: [`${full.toLowerCase()}.>`], storage, ...limits });
  streams.push(full);
  return full.toLowerCase();
}

const body = (i: number) =>
  JSON.stringify({ order: i, status: 'paid', amount: 1234, currency: 'EUR', at: '2026-12-01T00:00:00Z' });
const keyOf = (i: number) => `customer-${i % KEYS}`;

async function fill(destination: string, count: number, from = 0): Promise<void> {
  for (let i = from; i < from + count; i += CHUNK) {
    const n = Math.min(CHUNK, from + count - i);
    await outbox.publishMany(Array.from({ length: n }, (_, j) => ({ destination, payload: body(i + j), key: keyOf(i + j) })));
  }
}

function relayFor(subjectPrefix: string, destination: string, extra: Partial<ConstructorParameters<typeof OutboxRelay>[0]> = {}) {
  return new OutboxRelay({
    pool,
    schema,
    destinations: [destination],
    batchSize: batch,
    publisher: natsPublisher({ servers: NATS_URL, subjectPrefix }),
    ...extra,
  });
}

function untilPublished(relay: OutboxRelay, count: number): Promise<void> {
  let published = 0;
  return new Promise((resolve) =>
    relay.events.on('published', (b) => {
      published += b.count;
      if (published >= count) resolve();
    }),
  );
}

async function publishing(): Promise<void> {
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const runs = { bulk: { keyed: [] as number[], free: [] as number[] }, single: { keyed: [] as number[], free: [] as number[] } };
  for (let round = 0; round < 3; round++) {
    for (const kind of ['keyed', 'free'] as const) {
      const key = (i: number) => (kind === 'keyed' ? keyOf(i) : undefined);
      let started = performance.now();
      for (let i = 0; i < publishBulk; i += 1000) {
        const n = Math.min(1000, publishBulk - i);
        await outbox.publishMany(
          Array.from({ length: n }, (_, j) => ({ destination: 'publish', payload: body(i + j), key: key(i + j) })),
        );
      }
      runs.bulk[kind].push((publishBulk * 1000) / (performance.now() - started));
      let next = 0;
      started = performance.now();
      await Promise.all(
        Array.from({ length: 10 }, async () => {
          for (let i = next++; i < publishSingle; i = next++) await outbox.publish('publish', body(i), { key: key(i) });
        }),
      );
      runs.single[kind].push((publishSingle * 1000) / (performance.now() - started));
      await pool.query(`TRUNCATE ${s}.outbox`);
    }
  }
  // A bulk publish that must move at COMMIT: its transaction took its id first, and
  // another one published the same keys and committed before it.
  const [early, late] = [await pool.connect(), await pool.connect()];
  const moves: string[] = [];
  try {
    for (const n of [1_000, 10_000]) {
      const messages = (tag: string) =>
        Array.from({ length: n }, (_, i) => ({ destination: 'publish', key: `move-${n}-${i}`, payload: `${tag}${i}` }));
      await early.query('BEGIN');
      await early.query('SELECT pg_current_xact_id()');
      await late.query('BEGIN');
      for (let i = 0; i < n; i += 1000) await outbox.publishMany(messages('late').slice(i, i + 1000), { tx: late });
      let at = performance.now();
      await late.query('COMMIT');
      const lateMs = performance.now() - at;
      for (let i = 0; i < n; i += 1000) await outbox.publishMany(messages('early').slice(i, i + 1000), { tx: early });
      at = performance.now();
      await early.query('COMMIT');
      moves.push(`${n} keys: COMMIT ${lateMs.toFixed(0)} ms, the one moving behind it ${(performance.now() - at).toFixed(0)} ms`);
      await pool.query(`TRUNCATE ${s}.outbox`);
    }
  } finally {
    early.release();
    late.release();
  }
  const show = (xs: number[]) => `${Math.round(median(xs))}/s (${xs.map(Math.round).join(', ')})`;
  console.log(`publish     bulk, publishMany of 1,000: keyed ${show(runs.bulk.keyed)}, without a key ${show(runs.bulk.free)}`);
  console.log(`            single, 10 callers: keyed ${show(runs.single.keyed)}, without a key ${show(runs.single.free)}`);
  console.log(`            bulk moved at COMMIT: ${moves.join('; ')}`);
}

async function throughput(): Promise<void> {
  // The baseline: the same messages, straight to JetStream, windows of `batch` async acks.
  const direct = await stream('direct');
  const js = nc.jetstream();
  const payloads = Array.from({ length: backlog }, (_, i) => Buffer.from(body(i)));
  const started = performance.now();
  for (let i = 0; i < backlog; i += batch) {
    const window: Promise<unknown>[] = [];
    for (let j = i; j < Math.min(backlog, i + batch); j++) {
      const h = natsHeaders();
      h.set('Sluice-Key', keyOf(j));
      window.push(js.publish(`${direct}.orders`, payloads[j], { msgID: `${schema}:d${j}`, headers: h }));
    }
    await Promise.all(window);
  }
  const directRate = rate(backlog, performance.now() - started);

  const relayed = await stream('relayed');
  await fill('orders', backlog);
  const relay = relayFor(`${relayed}.`, 'orders');
  const done = untilPublished(relay, backlog);
  const t0 = performance.now();
  await relay.start();
  await done;
  const relayRate = rate(backlog, performance.now() - t0);
  await relay.stop();
  const stored = (await jsm.streams.info(relayed.toUpperCase())).state.messages;
  console.log(
    `throughput  backlog ${backlog}, batch ${batch}: relay ${relayRate}/s, direct JetStream ${directRate}/s, ` +
      `relay/direct ${((100 * relayRate) / directRate).toFixed(0)}%; stream holds ${stored}`,
  );
}

async function latency(): Promise<void> {
  const subject = await stream('latency');
  const relay = relayFor(`${subject}.`, 'latency', { pool: undefined, connectionString: url });
  const committedAt = new Map<string, number>();
  // The relay can have the ack before this process has seen its own COMMIT return: both are kept by id.
  const ackedAt = new Map<string, number>();
  relay.events.on('published', (b) => {
    const now = performance.now();
    for (const m of b.messages) ackedAt.set(m.id, now);
  });
  await relay.start();
  const warmup = warmupSeconds * 1000;
  const total = warmup + latencySeconds * 1000;
  const started = performance.now();
  const inFlight: Promise<void>[] = [];
  const loopDelay = monitorEventLoopDelay({ resolution: 5 });
  const load = loadavg()[0]!;
  // 1,000 messages a second: every 10 ms, the ones due by then, each its own transaction.
  for (let sent = 0; sent < total;) {
    if (sent >= warmup) loopDelay.enable();
    const due = Math.min(total, Math.floor(performance.now() - started));
    for (; sent < due; sent++) {
      const i = sent;
      inFlight.push(
        outbox.publish('latency', body(i), { key: keyOf(i) }).then((id) => {
          committedAt.set(id, performance.now());
        }),
      );
    }
    await new Promise((r) => setTimeout(r, 10));
  }
  await Promise.all(inFlight);
  const deadline = performance.now() + 60_000;
  while ([...committedAt.keys()].some((id) => !ackedAt.has(id)) && performance.now() < deadline) {
    await new Promise((r) => setTimeout(r, 20));
  }
  loopDelay.disable();
  await relay.stop();
  // Ids follow the order of sending within this one destination: the first `warmup` are the warm-up.
  const byId = [...committedAt].sort(([a], [b]) => Number(a) - Number(b));
  const latencyOf = ([id, at]: [string, number]) => Math.max(0, (ackedAt.get(id) ?? Infinity) - at);
  const d = distribution(byId.slice(warmup).map(latencyOf));
  const f = (n: number) => n.toFixed(1);
  console.log(
    `latency     ${total - warmup} messages at 1000/s after ${warmup} of warm-up, commit to ack recorded: ` +
      `p50 ${f(d.p50)} ms, p95 ${f(d.p95)} ms, p99 ${f(d.p99)} ms, max ${f(d.max)} ms`,
  );
  if (warmup > 0) {
    const w = distribution(byId.slice(0, warmup).map(latencyOf));
    console.log(`            the warm-up alone: p50 ${f(w.p50)} ms, p99 ${f(w.p99)} ms, max ${f(w.max)} ms`);
  }
  const ms = (ns: number) => f(ns / 1e6);
  console.log(
    `            this process's event-loop delay meanwhile: p99 ${ms(loopDelay.percentile(99))} ms, max ${ms(loopDelay.max)} ms; ` +
      `load average ${load.toFixed(1)} at the start, ${loadavg()[0]!.toFixed(1)} at the end (${availableParallelism()} cores)`,
  );
}

async function size(): Promise<void> {
  const subject = await stream('size', { max_msgs: 100_000 });
  const relay = relayFor(`${subject}.`, 'size');
  let published = 0;
  relay.events.on('published', (b) => (published += b.count));
  await relay.start();
  const every = Math.max(CHUNK, sizeEvery || Math.floor(sizeTotal / 10));
  const samples: string[] = [];
  const sizes: number[] = [];
  const started = performance.now();
  const limitMs = sizeMinutes > 0 ? sizeMinutes * 60_000 : Infinity;
  let next = every;
  let written = 0;
  for (let i = 0; i < sizeTotal; i += CHUNK) {
    if (performance.now() - started > limitMs) {
      console.log(`            stopped adding after ${sizeMinutes} min, at ${written} messages`);
      break;
    }
    await fill('size', Math.min(CHUNK, sizeTotal - i), i);
    written = Math.min(sizeTotal, i + CHUNK);
    // A steady backlog of at most 50,000 messages.
    while (i + CHUNK - published > 50_000) await new Promise((r) => setTimeout(r, 5));
    if (published >= next) {
      next += every;
      const { rows } = await pool.query(`SELECT pg_total_relation_size('${s}.outbox')::bigint AS bytes,
        (SELECT n_live_tup FROM pg_stat_user_tables WHERE relid = '${s}.outbox'::regclass) AS live`);
      sizes.push(Number(rows[0].bytes));
      samples.push(`${published}: ${(Number(rows[0].bytes) / 1048576).toFixed(1)} MiB`);
      // As it goes: a long run that is stopped still leaves its curve.
      console.log(`            ${samples.at(-1)} (${((performance.now() - started) / 1000).toFixed(0)} s)`);
    }
  }
  while (published < written) await new Promise((r) => setTimeout(r, 20));
  const elapsed = performance.now() - started;
  await relay.stop();
  const later = sizes.slice(1);
  console.log(
    `size        ${written} messages in ${(elapsed / 1000).toFixed(0)} s (${rate(written, elapsed)}/s end to end); outbox size after n relayed:`,
  );
  console.log(`            ${samples.join(', ')}`);
  if (later.length > 0) {
    console.log(
      `            after the first sample: min ${(Math.min(...later) / 1048576).toFixed(1)} MiB, max ${(Math.max(...later) / 1048576).toFixed(1)} MiB`,
    );
  }
}

try {
  console.log(`outbox bench: Postgres ${embedded ? 'embedded (private)' : 'from DATABASE_URL'}, NATS ${NATS_URL}`);
  if (only.has('throughput')) await throughput();
  if (only.has('latency')) await latency();
  if (only.has('size')) await size();
  if (only.has('publish')) await publishing();
} finally {
  for (const name of streams) await jsm.streams.delete(name).catch(() => {});
  await nc.close();
  await outbox.close();
  await pool.query(`DROP SCHEMA ${s} CASCADE`).catch(() => {});
  await pool.end();
  await embedded?.stop();
}
