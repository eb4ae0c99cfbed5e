/**
 * What a failed job's stored stack holds when @opentelemetry/api is installed (it
 * is, as a dev dependency) but no tracer provider is registered: the handler runs
 * unwrapped, so no OpenTelemetry frame sits between the worker and the handler.
 * A file of its own because tests/observability.test.ts registers a provider for
 * its whole process.
 */
import { trace } from '@opentelemetry/api';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Queue, Worker } from '../src/index.js';
import { createTestSchema, waitFor, type TestDatabase } from './helpers/database.js';

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestSchema('stack');
});
afterAll(async () => {
  await db.drop();
});

describe('a failed job without a tracer provider', () => {
  it('stores a stack with no @opentelemetry frames', async () => {
    // No SDK: the API's global provider is the proxy without a delegate.
    expect(trace.getTracerProvider().getTracer('probe').startSpan('probe').isRecording()).toBe(false);
    const queue = new Queue({ pool: db.pool, schema: db.schema });
    const worker = new Worker({
      pool: db.pool,
      schema: db.schema,
      tasks: {
        // Throws before its first await, so the stack also holds the frames that called it.
        explode: async function explodingHandler() {
          throw new Error('exploded on purpose');
        },
      },
    });
    worker.on('error', () => {});
    await worker.start();
    try {
      const id = await queue.enqueue('explode', {}, { maxAttempts: 1 });
      const job = await waitFor(async () => {
        const row = await queue.getJob(id);
        return row?.status === 'failed' ? row : undefined;
      }, 'the job to fail');
      const stack = job.last_error ?? '';
      expect(stack).toMatch(/^Error: exploded on purpose\n/);
      expect(stack).toMatch(/at .*explodingHandler /);
      expect(stack).not.toMatch(/@opentelemetry/);
    } finally {
      await worker.stop();
      await queue.close();
    }
  });
});
