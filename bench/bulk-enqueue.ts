/**
 * Bulk enqueue against the seed's plain `unnest` INSERT, batch by batch:
 *
 *   DATABASE_URL=postgres://... npm run bench:bulk -- [--rounds 400] [--batch 1000]
 *
 * Each round sends one batch of each contender in a shuffled order, each on a
 * connection of its own, into a fresh schema of its own: `queue.enqueueMany` (the
 * built package, as users call it), Sluice's uniform batch statement sent bare (the
 * same SQL without the Queue's checks), and the seed pattern (the plain table and
 * `unnest` insert of bench/systems/seed-sql.mjs, its per-row NOTIFY trigger
 * included). Taking turns batch by batch, not in blocks, keeps the machine's drift
 * (this shared 2-core machine's speed moves by half within seconds) and each
 * connection's warmth out of the comparison. Prints the median batch time of each
 * and its rate as a share of the seed's. Uses dist/ (run `npm run build` first).
 */
import { parseArgs } from 'node:util';
import pg from 'pg';
import { Queue } from '../dist/index.js';
import { enqueueStatements } from '../dist/db/statements/enqueue.js';
import { migratedSchema, ScratchSchema } from './lib/database.js';
import { shuffled } from './lib/shuffled.js';
import { median } from './lib/stats.js';
// @ts-expect-error: a plain ES module without types, shared with the full benchmark
import * as seed from './systems/seed-sql.mjs';

const { values: args } = parseArgs({
  options: { rounds: { type: 'string', default: '400' }, batch: { type: 'string', default: '1000' } },
});
const rounds = Number(args.rounds);
const size = Number(args.batch);
const url = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

interface SeedClient {
  enqueueMany(is: number[]): Promise<unknown>;
  close(): Promise<void>;
}

const sluice = await migratedSchema(url, 'bulk sluice');
const bare = await migratedSchema(url, 'bulk bare');
const plain = new ScratchSchema(url, 'bulk seed');
const queue = new Queue({ connectionString: url, schema: sluice.schema });
const barePool = new pg.Pool({ connectionString: url, max: 1 });
await (seed as { install(o: object): Promise<void> }).install({ url, schema: plain.schema });
const seedClient = await (seed as { openClient(o: object): Promise<SeedClient> }).openClient({ url, schema: plain.schema });
const statement = enqueueStatements(bare.schema).enqueueManyUniform;
let next = 0;
const batch = () => Array.from({ length: size }, () => next++);
const contenders: Record<string, () => Promise<unknown>> = {
  'seed unnest INSERT': () => seedClient.enqueueMany(batch()),
  'queue.enqueueMany': () => queue.enqueueMany(batch().map((i) => ({ task: 'noop', payload: { i } }))),
  'its statement, bare': () => {
    const is = batch();
    const values = ['default', JSON.stringify(is.map(() => 'noop')), `[${is.map((i) => JSON.stringify({ i })).join(',')}]`];
    return barePool.query({ name: 'bulk', text: statement, values: [...values, 5, 0, null, null] });
  },
};
const names = Object.keys(contenders);
const times = new Map(names.map((name) => [name, [] as number[]]));
try {
  for (let warm = 0; warm < 5; warm++) for (const name of names) await contenders[name]!();
  for (let round = 0; round < rounds; round++) {
    for (const name of shuffled(names)) {
      const started = performance.now();
      await contenders[name]!();
      times.get(name)!.push(performance.now() - started);
    }
  }
  const total = (name: string) => times.get(name)!.reduce((a, b) => a + b, 0);
  console.log(`${rounds} rounds of one ${size}-job batch each, shuffled`);
  for (const name of names) {
    const share = (100 * total('seed unnest INSERT')) / total(name);
    console.log(
      `${name.padEnd(20)} median ${median(times.get(name)!).toFixed(2)} ms per batch, ` +
        `${Math.round((rounds * size) / (total(name) / 1000))} jobs/s, ${share.toFixed(1)}% of the seed's rate`,
    );
  }
} finally {
  await queue.close();
  await seedClient.close();
  await barePool.end();
  for (const db of [sluice, bare, plain]) await db.drop();
}
