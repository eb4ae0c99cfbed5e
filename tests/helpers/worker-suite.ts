import { afterAll, afterEach, beforeAll } from 'vitest';
import { Queue, Worker, type WorkerOptions } from '../../src/index.js';
import { createTestSchema, type TestDatabase } from './database.js';

export interface WorkerSuite {
  readonly db: TestDatabase;
  readonly queue: Queue;
  /** `n` started workers on the suite's schema, each with its own connections; stopped after each test. */
  startWorkers(n: number, options: Omit<WorkerOptions, 'connectionString' | 'schema'>): Promise<Worker[]>;
}

/**
 * Registers the hooks of a test file that runs in-process workers: a fresh
 * schema and a Queue for the file, workers stopped after every test.
 */
export function workerSuite(prefix: string): WorkerSuite {
  let db: TestDatabase | undefined;
  let queue: Queue | undefined;
  const workers: Worker[] = [];
  beforeAll(async () => {
    db = await createTestSchema(prefix);
    queue = new Queue({ pool: db.pool, schema: db.schema });
  });
  afterEach(() => Promise.all(workers.splice(0).map((w) => w.stop())).then(() => undefined));
  afterAll(async () => {
    await queue?.close();
    await db?.drop();
  });
  return {
    get db() {
      return db!;
    },
    get queue() {
      return queue!;
    },
    async startWorkers(n, options) {
      const started = Array.from({ length: n }, (_, i) => {
        const worker = new Worker({ connectionString: db!.url, schema: db!.schema, workerId: `w${workers.length + i}`, ...options });
        worker.on('error', () => {});
        workers.push(worker);
        return worker;
      });
      await Promise.all(started.map((w) => w.start()));
      return started;
    },
  };
}
