/**
 * The RabbitMQ relay on a throttled broker: `node --import tsx bench/rabbitmq-throttle.ts
 * AMQP_URL BEAM_PID [messages=120000] [partitions=4] [batchSize=30000]`. A backlog of
 * keyed messages is relayed while the broker's Erlang VM (BEAM_PID, its beam.smp: run it
 * on a RabbitMQ node of your own, never a shared one) is stopped 2 s and let run 0.4 s in
 * turn, so confirms come slowly but steadily. Prints the time, the messages in the queue
 * (delivered to it; more than sent are duplicates) and the relay's failure events.
 * Outside review 194 saw 11-15% sent twice with 4 and 16 partitions, when the confirm
 * timeout was timed per batch. Uses DATABASE_URL (default the local test database).
 */
import pg from 'pg';
import amqp from 'amqplib';
import { Outbox, OutboxRelay, migrate, rabbitMqPublisher } from '../src/index.js';

const url = process.argv[2] ?? 'amqp://guest:guest@127.0.0.1:5672';
const schema = 'scratch_rmqslow';
const N = Number(process.argv[4] ?? 120000);
const partitions = Number(process.argv[5] ?? 4);
const beam = Number(process.argv[3]);
const batchSize = Number(process.argv[6] ?? 30000);
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test' });
await pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
await migrate({ pool, schema });
const conn = await amqp.connect(url);
const ch = await conn.createChannel();
const queue = 'qslow';
await ch.deleteQueue(queue);
await ch.assertQueue(queue, { durable: true });
const outbox = new Outbox({ pool, schema });
for (let i = 0; i < N; i += 10000)
  await outbox.publishMany(Array.from({ length: 10000 }, (_, k) => ({ destination: queue, key: `k${(i + k) % 500}`, payload: String(i + k) })));
const relay = new OutboxRelay({ pool, schema, publisher: rabbitMqPublisher({ url }), destinations: [queue], partitions, batchSize });
const failures: string[] = [];
relay.events.on('failure', (f) => failures.push(f.error.message.slice(0, 80)));
let published = 0;
relay.events.on('published', (b) => (published += b.count));
const t0 = Date.now();
await relay.start();
let stop = false;
const throttle = (async () => {
  while (!stop) {
    process.kill(beam, 'SIGSTOP');
    await new Promise((r) => setTimeout(r, 2000));
    process.kill(beam, 'SIGCONT');
    await new Promise((r) => setTimeout(r, 400));
  }
})();
while (published < N && Date.now() - t0 < 180_000) await new Promise((r) => setTimeout(r, 200));
stop = true;
await throttle;
process.kill(beam, 'SIGCONT');
await new Promise((r) => setTimeout(r, 1000));
const count = (await ch.checkQueue(queue)).messageCount;
console.log('s', (Date.now() - t0) / 1000, 'published', published, 'in queue', count, 'duplicates', count - N, 'failures', failures.length, failures.slice(0, 3));
await relay.stop();
await outbox.close();
await ch.deleteQueue(queue);
await conn.close();
await pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
await pool.end();
