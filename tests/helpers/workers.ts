import { afterAll, afterEach, beforeAll } from 'vitest';
import { Queue, Worker, type WorkerOptions } from '../../src/index.js';
import { createTestSchema, type TestDatabase } from './database.js';
import { TEST_DRIVER } from './driver.js';

export interface WorkerFixture {
  db: TestDatabase;
  queue: Queue;
  /** A started worker on the file's schema; stopped after each test. `before` sees it before it starts. */
  start(options: Omit<WorkerOptions, 'schema'>, before?: (worker: Worker) => void): Promise<Worker>;
}

/**
 * Registers the hooks of a test file that runs workers: one schema and Queue for
 * the file, every worker started through `start` stopped after each test.
 */
export function useWorkers(prefix: string): WorkerFixture {
  const workers: Worker[] = [];
  const fixture = {
    async start(options: Omit<WorkerOptions, 'schema'>, before?: (worker: Worker) => void) {
      const worker = new Worker({
        connectionString: fixture.db.url,
        schema: fixture.db.schema,
        driver: TEST_DRIVER,
        ...options,
      });
      worker.on('error', () => {});
      before?.(worker);
      workers.push(worker);
      await worker.start();
      return worker;
    },
  } as WorkerFixture;
  beforeAll(async () => {
    fixture.db = await createTestSchema(prefix);
    // On postgres.js the Queue runs on it too; on pg it shares the file's pool.
    fixture.queue =
      TEST_DRIVER === 'postgres.js'
        ? new Queue({ connectionString: fixture.db.url, driver: TEST_DRIVER, schema: fixture.db.schema })
        : new Queue({ pool: fixture.db.pool, schema: fixture.db.schema });
  });
  afterEach(async () => {
    await Promise.all(workers.splice(0).map((w) => w.stop()));
  });
  afterAll(async () => {
    await fixture.queue.close();
    await fixture.db.drop();
  });
  return fixture;
}

/** A promise with its resolve function, for handlers that wait for the test. */
export function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}
