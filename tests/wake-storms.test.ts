import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Queue, Worker, type WorkerOptions } from '../src/index.js';
import { channelFor } from '../src/db/identifiers.js';
import { createTestSchema, waitFor, type TestDatabase } from './helpers/database.js';
import { TEST_DRIVER } from './helpers/driver.js';

// Damping of wake-up storms (WakeCooldown): idle workers whose last claim came back
// empty do not answer every notification with a claim of their own.
let db: TestDatabase;
let queue: Queue;
const workers: Worker[] = [];

beforeAll(async () => {
  db = await createTestSchema('wake_storms');
  queue = new Queue({ pool: db.pool, schema: db.schema });
});
afterAll(async () => {
  await Promise.all(workers.map((w) => w.stop()));
  await queue.close();
  await db.drop();
});

async function startWorker(ran: string[], options: Partial<WorkerOptions>): Promise<Worker> {
  const worker = new Worker({
    connectionString: db.url,
    schema: db.schema,
    driver: TEST_DRIVER,
    concurrency: 2,
    tasks: { noop: (_payload, ctx) => void ran.push(ctx.job.id) },
    ...options,
  });
  worker.on('error', () => {});
  workers.push(worker);
  await worker.start();
  return worker;
}

describe('wake-up storms', () => {
  it('idle workers that found nothing merge the notifications that follow; every job runs once', async () => {
    const ranA: string[] = [];
    const ranQuiet: string[] = [];
    // Two workers start on an empty queue: their first claims come back empty, so
    // for the next minute notifications do not make them claim (nor does a poll).
    const quiet = [
      await startWorker(ranQuiet, { wakeCooldownMs: 60_000, pollIntervalMs: 3_600_000 }),
      await startWorker(ranQuiet, { wakeCooldownMs: 60_000, pollIntervalMs: 3_600_000 }),
    ];
    // Two empty claims in a row start a cooldown: the start's, then one for a
    // notification with nothing behind it.
    await waitFor(() => quiet.every((w) => w.stats.emptyClaims >= 1), 'the quiet workers first empty claims');
    await db.pool.query(`SELECT pg_notify($1, ${db.s}.wake_payload('default', now()))`, [channelFor(db.schema)]);
    await waitFor(() => quiet.every((w) => w.stats.emptyClaims >= 2), 'the quiet workers second empty claims');
    const a = await startWorker(ranA, { wakeCooldownMs: 0 });

    const ids: string[] = [];
    for (let i = 0; i < 20; i++) ids.push(await queue.enqueue('noop', {}));
    await waitFor(() => ranA.length + ranQuiet.length >= 20, 'all 20 jobs run');

    // Each job ran once, wherever it ran.
    expect([...ranA, ...ranQuiet].sort()).toEqual([...ids].sort());
    // Without the cooldown each quiet worker claims on each of the 20 notifications
    // it hears. With it, only the claims before the jobs can have gone out (the
    // start's, the LISTEN wake's, the empty notification's).
    for (const w of quiet) expect(w.stats.claims).toBeLessThanOrEqual(3);
    expect(a.stats.claimed).toBeGreaterThanOrEqual(20 - ranQuiet.length);
  });
});
