import { hostname } from 'node:os';
import { Writable } from 'node:stream';
import { context, propagation, trace, SpanKind, SpanStatusCode, type TextMapPropagator } from '@opentelemetry/api';
import { CompositePropagator, W3CTraceContextPropagator } from '@opentelemetry/core';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import pg from 'pg';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, PermanentFailure, Queue, SluiceMetrics, Snooze, Worker, type WorkerOptions } from '../src/index.js';
import { metricsUrl } from '../src/metrics/server.js';
import { createTestSchema, waitFor, type TestDatabase } from './helpers/database.js';
import { captureWarnings } from './helpers/warnings.js';

let db: TestDatabase;
const exporter = new InMemorySpanExporter();

beforeAll(async () => {
  db = await createTestSchema('obs');
  // The OpenTelemetry SDK an application would set up; global to this test file's process.
  trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
});
afterAll(async () => {
  trace.disable();
  propagation.disable();
  context.disable();
  await db.drop();
});

async function withWorker<T>(
  options: Omit<WorkerOptions, 'connectionString' | 'schema'>,
  fn: (w: Worker) => Promise<T>,
): Promise<T> {
  const worker = new Worker({ connectionString: db.url, schema: db.schema, ...options });
  worker.on('error', () => {});
  await worker.start();
  try {
    return await fn(worker);
  } finally {
    await worker.stop();
  }
}

/** The value of one sample line of the Prometheus text format, or undefined. */
function sample(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const match = /^([a-z_]+)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!match || match[1] !== name) continue;
    const found = Object.fromEntries([...(match[2] ?? '').matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], m[2]]));
    if (Object.entries(labels).every(([k, v]) => found[k] === v)) return Number(match[3]);
  }
  return undefined;
}

describe('metrics', () => {
  it('serves Prometheus metrics over HTTP: enqueued, completed, failed, run time, claims, depth', async () => {
    const metrics = new SluiceMetrics();
    const queue = new Queue({ pool: db.pool, schema: db.schema, metrics });
    await withWorker(
      {
        queues: ['metrics'],
        tracing: false,
        metrics: { port: 0, collector: metrics },
        tasks: {
          ok: async () => {},
          bad: async () => {
            throw new PermanentFailure('no');
          },
        },
      },
      async (worker) => {
        // The scrape URL as a Prometheus config takes it, path included.
        expect(worker.metricsUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
        await queue.enqueueMany(Array.from({ length: 5 }, () => ({ task: 'ok', queue: 'metrics' })));
        const bad = await queue.enqueue('bad', {}, { queue: 'metrics' });
        await queue.enqueue('ok', {}, { queue: 'metrics', delayMs: 3_600_000 });
        await waitFor(async () => (await queue.getJob(bad))?.status === 'failed', 'the bad job to fail');
        await waitFor(async () => {
          const { rows } = await db.pool.query(
            `SELECT count(*)::int AS n FROM ${db.s}.jobs WHERE queue = 'metrics' AND status = 'completed'`,
          );
          return rows[0].n === 5;
        }, 'the 5 good jobs to complete');

        const res = await fetch(worker.metricsUrl!);
        expect(res.status).toBe(200);
        expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
        const text = await res.text();
        const q = { queue: 'metrics' };
        expect(sample(text, 'sluice_jobs_enqueued_total', { ...q, task: 'ok' })).toBe(6);
        expect(sample(text, 'sluice_jobs_enqueued_total', { ...q, task: 'bad' })).toBe(1);
        expect(sample(text, 'sluice_jobs_completed_total', { ...q, task: 'ok' })).toBe(5);
        expect(sample(text, 'sluice_jobs_failed_total', { ...q, task: 'bad', final: 'true' })).toBe(1);
        expect(sample(text, 'sluice_job_duration_seconds_count', { ...q, task: 'ok', outcome: 'completed' })).toBe(5);
        expect(sample(text, 'sluice_job_wait_seconds_count', { ...q, task: 'ok' })).toBe(5);
        // Every claimed job was counted in some claim batch.
        expect(sample(text, 'sluice_claim_batch_size_sum')).toBe(6);
        expect(sample(text, 'sluice_queue_depth', { ...q, schema: db.schema, state: 'scheduled' })).toBe(1);
        expect(sample(text, 'sluice_queue_depth', { ...q, schema: db.schema, state: 'due' })).toBe(0);
        expect(sample(text, 'sluice_maintenance_leader')).toBe(1);
        expect(sample(text, 'sluice_jobs_running')).toBe(0);
        expect(sample(text, 'sluice_queue_depth_up', { schema: db.schema })).toBe(1);
        expect(sample(text, 'sluice_jobs_pruned_total', { mode: 'removed' })).toBe(0);
      },
    );
    await queue.close();
  });

  it('sluice_jobs_running counts down for running jobs that end without a result: cancelled, snoozed (outside review 201)', async () => {
    const metrics = new SluiceMetrics();
    const queue = new Queue({ pool: db.pool, schema: db.schema });
    const started: string[] = [];
    await withWorker(
      {
        queues: ['metrics-running'],
        tracing: false,
        metrics: { collector: metrics },
        tasks: {
          waits: async (_p, { job, signal }) => {
            started.push(job.id);
            await new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason as Error)));
          },
          snoozes: async (_p, { job }) => {
            started.push(job.id);
            throw new Snooze(3_600_000);
          },
        },
      },
      async (worker) => {
        const running = async () => sample(await metrics.text(), 'sluice_jobs_running');
        const cancelled = await queue.enqueue('waits', {}, { queue: 'metrics-running' });
        await waitFor(() => started.includes(cancelled), 'the job to start');
        expect(await running()).toBe(1);
        const cancel = new Promise((resolve) => worker.once('job:cancel', resolve));
        expect((await queue.cancel(cancelled)).ok).toBe(true);
        await cancel;
        expect(await running()).toBe(0);
        const snooze = new Promise((resolve) => worker.once('job:snooze', resolve));
        await queue.enqueue('snoozes', {}, { queue: 'metrics-running' });
        await snooze;
        expect(await running()).toBe(0);
      },
    );
    await queue.close();
  });

  it('keeps the schemas of Queues and Workers sharing one collector apart, and adds up their running jobs (outside review 245)', async () => {
    const other = await createTestSchema('obs_other');
    const metrics = new SluiceMetrics();
    const queues = [db, other].map((d) => new Queue({ pool: d.pool, schema: d.schema, metrics }));
    const release: (() => void)[] = [];
    const started: string[] = [];
    const tasks = {
      holds: async (payload: { n: string }) => {
        started.push(payload.n);
        await new Promise<void>((resolve) => release.push(resolve));
      },
    };
    const workers = [db, other, db].map(
      (d) =>
        new Worker({
          connectionString: d.url,
          schema: d.schema,
          queues: ['shared-metrics'],
          tasks,
          metrics: { collector: metrics },
        }),
    );
    try {
      for (const w of workers) {
        w.on('error', () => {});
        await w.start();
      }
      const opts = { queue: 'shared-metrics' };
      // Job ids are per schema: the payloads tell the five jobs apart.
      const ids = ['a', 'b', 'c', 'd', 'e'];
      await queues[0]!.enqueueMany(ids.slice(0, 3).map((n) => ({ task: 'holds', payload: { n }, ...opts })));
      await queues[1]!.enqueueMany(ids.slice(3).map((n) => ({ task: 'holds', payload: { n }, ...opts })));
      await waitFor(() => ids.every((id) => started.includes(id)), 'all five jobs to start');
      const text = await metrics.text();
      const mine = { schema: db.schema, queue: 'shared-metrics', task: 'holds' };
      const theirs = { schema: other.schema, queue: 'shared-metrics', task: 'holds' };
      expect(sample(text, 'sluice_jobs_enqueued_total', mine)).toBe(3);
      expect(sample(text, 'sluice_jobs_enqueued_total', theirs)).toBe(2);
      // Two workers of db.schema hold its three jobs between them: their counts add up.
      expect(sample(text, 'sluice_jobs_running', { schema: db.schema })).toBe(3);
      expect(sample(text, 'sluice_jobs_running', { schema: other.schema })).toBe(2);
      for (const done of release) done();
      await waitFor(
        async () => sample(await metrics.text(), 'sluice_jobs_running', { schema: db.schema }) === 0,
        'the jobs to end',
      );
      await waitFor(
        async () => sample(await metrics.text(), 'sluice_jobs_completed_total', theirs) === 2,
        "the other schema's completions",
      );
      // One worker of a schema stopping leaves the depth of the other worker's schema reported.
      await workers[2]!.stop();
      expect(sample(await metrics.text(), 'sluice_queue_depth_up', { schema: db.schema })).toBe(1);
    } finally {
      for (const w of workers) await w.stop();
      for (const q of queues) await q.close();
      await other.drop();
    }
  });

  it("a worker that cannot start (its metrics port in use) leaves a shared collector as it was: the other's depth stays up (outside review 279)", async () => {
    const metrics = new SluiceMetrics();
    await withWorker({ tasks: { t: () => {} }, metrics: { port: 0, collector: metrics } }, async (first) => {
      const port = Number(new URL(first.metricsUrl!).port);
      const second = new Worker({
        connectionString: db.url,
        schema: db.schema,
        tasks: { t: () => {} },
        metrics: { port, collector: metrics },
      });
      second.on('error', () => {});
      await expect(second.start()).rejects.toThrow(/already in use/);
      expect(sample(await metrics.text(), 'sluice_queue_depth_up', { schema: db.schema })).toBe(1);
      const served = await (await fetch(first.metricsUrl!)).text();
      expect(sample(served, 'sluice_queue_depth_up', { schema: db.schema })).toBe(1);
    });
  });

  it('refuses a registry that is not one, or that has its metrics already, with a ConfigError (outside review 245)', async () => {
    const { Registry } = await import('prom-client');
    expect(() => new SluiceMetrics({ registry: {} as never })).toThrow(
      new ConfigError('SluiceMetrics: registry must be a prom-client Registry'),
    );
    const registry = new Registry();
    const first = new SluiceMetrics({ registry });
    const names = (await registry.getMetricsAsJSON()).map((m) => m.name);
    expect(() => new SluiceMetrics({ registry })).toThrow(ConfigError);
    expect(() => new SluiceMetrics({ registry })).toThrow(/already been registered in this registry/);
    // The refused one left nothing behind, and the first one still counts.
    expect((await registry.getMetricsAsJSON()).map((m) => m.name)).toEqual(names);
    first.enqueued.inc({ schema: 's', queue: 'q', task: 't' });
    expect(sample(await registry.metrics(), 'sluice_jobs_enqueued_total', { schema: 's' })).toBe(1);
    // Another prefix is another set of names: accepted.
    expect(() => new SluiceMetrics({ registry, prefix: 'other_' })).not.toThrow();
  });

  it('says when it could not read queue depth: behind a lock, within 5 s, and when the database is away (outside review 83)', async () => {
    const metrics = new SluiceMetrics();
    const locker = await db.pool.connect();
    const away = new pg.Pool({ connectionString: 'postgres://postgres@127.0.0.1:1/none' });
    try {
      await locker.query(`BEGIN; LOCK TABLE ${db.s}.jobs IN ACCESS EXCLUSIVE MODE`);
      metrics.watchSchema(db.schema, db.pool);
      metrics.watchSchema('elsewhere', away);
      const text = await metrics.text();
      expect(sample(text, 'sluice_queue_depth_up', { schema: db.schema })).toBe(0);
      expect(sample(text, 'sluice_queue_depth_up', { schema: 'elsewhere' })).toBe(0);
      expect(sample(text, 'sluice_queue_depth', { schema: db.schema })).toBeUndefined();
      await locker.query('ROLLBACK');
      const again = await metrics.text();
      expect(sample(again, 'sluice_queue_depth_up', { schema: db.schema })).toBe(1);
    } finally {
      await locker.query('ROLLBACK').catch(() => {});
      locker.release();
      await away.end();
    }
  });

  it('keeps a drained queue at 0 instead of dropping its depth series, and shows queues with settings and no jobs', async () => {
    const metrics = new SluiceMetrics();
    metrics.watchSchema(db.schema, db.pool);
    const queue = new Queue({ pool: db.pool, schema: db.schema });
    const drains = { schema: db.schema, queue: 'obs-drains' };
    const paused = { schema: db.schema, queue: 'obs-paused-empty' };
    const id = await queue.enqueue('t', {}, { queue: 'obs-drains' });
    await queue.pauseQueue('obs-paused-empty');
    expect(sample(await metrics.text(), 'sluice_queue_depth', { ...drains, state: 'due' })).toBe(1);
    await queue.cancel(id);
    const text = await metrics.text();
    for (const state of ['due', 'scheduled', 'processing']) {
      expect(sample(text, 'sluice_queue_depth', { ...drains, state })).toBe(0);
      expect(sample(text, 'sluice_queue_depth', { ...paused, state })).toBe(0);
    }
    expect(sample(text, 'sluice_queue_oldest_due_age_seconds', drains)).toBe(0);
    // A fresh collector (a restarted worker) knows the drained queue no more; the paused one it reads from the queues table.
    const fresh = new SluiceMetrics();
    fresh.watchSchema(db.schema, db.pool);
    const after = await fresh.text();
    expect(sample(after, 'sluice_queue_depth', { ...drains, state: 'due' })).toBeUndefined();
    expect(sample(after, 'sluice_queue_depth', { ...paused, state: 'due' })).toBe(0);
    // A worker's collector reports the worker's own queues from the start (outside review 164).
    const own = new SluiceMetrics();
    await withWorker({ queues: ['obs-own-empty'], tasks: { t: () => {} }, metrics: { collector: own } }, async () => {
      const text = await own.text();
      expect(sample(text, 'sluice_queue_depth', { schema: db.schema, queue: 'obs-own-empty', state: 'due' })).toBe(0);
    });
    await queue.resumeQueue('obs-paused-empty');
    await queue.close();
  });

  it('rejects bad metrics and logger options', () => {
    const base = { connectionString: db.url, tasks: { a: () => {} } };
    expect(() => new Worker({ ...base, metrics: { port: 70_000 } })).toThrow(ConfigError);
    expect(() => new Worker({ ...base, metrics: { prot: 1 } as never })).toThrow(/unknown option "prot"/);
    expect(() => new Worker({ ...base, logger: console.log as never })).toThrow(/logger must have/);
    expect(() => new Queue({ metrics: {} as never })).toThrow(ConfigError);
    // Neither a port nor a collector: refused, not taken as "metrics on" (outside review 245).
    expect(() => new Worker({ ...base, metrics: {} })).toThrow(
      'metrics: give a port to serve them, or a collector to record into',
    );
    expect(() => new Worker({ ...base, metrics: { port: undefined, host: '0.0.0.0' } })).toThrow(ConfigError);
  });

  it('on a wildcard host (0.0.0.0, ::) the scrape URL names this machine, not the wildcard', async () => {
    expect(metricsUrl('0.0.0.0', 9464)).toBe(`http://${hostname()}:9464/metrics`);
    expect(metricsUrl('::', 9464)).toBe(`http://${hostname()}:9464/metrics`);
    expect(metricsUrl('::1', 9464)).toBe('http://[::1]:9464/metrics');
    expect(metricsUrl('10.0.0.7', 9464)).toBe('http://10.0.0.7:9464/metrics');
    await withWorker(
      { queues: ['wildcard'], tracing: false, metrics: { port: 0, host: '0.0.0.0' }, tasks: { ok: async () => {} } },
      async (worker) => {
        const url = new URL(worker.metricsUrl!);
        expect(url.hostname).toBe(hostname().toLowerCase());
        expect(url.pathname).toBe('/metrics');
        // It listens on every interface, loopback included.
        const res = await fetch(`http://127.0.0.1:${url.port}/metrics`);
        expect(res.status).toBe(200);
      },
    );
  });
});

describe('tracing', () => {
  it('carries the enqueue span context in the job: the worker span is its child, errors are recorded', async () => {
    exporter.reset();
    const queue = new Queue({ pool: db.pool, schema: db.schema });
    await withWorker(
      {
        queues: ['traced'],
        tasks: {
          fine: async () => {},
          broken: async () => {
            throw new PermanentFailure('broken on purpose');
          },
        },
      },
      async () => {
        const fine = await queue.enqueue('fine', { n: 1 }, { queue: 'traced' });
        const [broken] = await queue.enqueueMany([{ task: 'broken', queue: 'traced' }]);
        const { rows } = await db.pool.query(`SELECT trace_context FROM ${db.s}.jobs WHERE id = $1`, [fine]);
        expect(rows[0].trace_context.traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
        await waitFor(
          () => exporter.getFinishedSpans().filter((s) => s.kind === SpanKind.CONSUMER).length === 2,
          'both process spans',
        );

        const spans = exporter.getFinishedSpans();
        for (const [id, task] of [
          [fine, 'fine'],
          [broken!, 'broken'],
        ] as const) {
          const producer = spans.find((s) => s.kind === SpanKind.PRODUCER && s.name === `sluice enqueue ${task}`)!;
          const consumer = spans.find((s) => s.kind === SpanKind.CONSUMER && s.attributes['messaging.message.id'] === id)!;
          expect(consumer.name).toBe(`sluice process ${task}`);
          expect(consumer.spanContext().traceId).toBe(producer.spanContext().traceId);
          expect(consumer.parentSpanContext?.spanId).toBe(producer.spanContext().spanId);
          expect(consumer.attributes).toMatchObject({ 'messaging.destination.name': 'traced', 'sluice.attempt': 1 });
        }
        // A batch of several tasks names none (outside review 249: "sluice enqueue batch", as if a task were so named).
        exporter.reset();
        await queue.enqueueMany([
          { task: 'fine', queue: 'traced' },
          { task: 'broken', queue: 'traced' },
        ]);
        const mixed = exporter.getFinishedSpans().find((s) => s.kind === SpanKind.PRODUCER)!;
        expect(mixed.name).toBe('sluice enqueue');
        expect(mixed.attributes['sluice.task']).toBeUndefined();
        expect(mixed.attributes['messaging.batch.message_count']).toBe(2);
        const failed = spans.find((s) => s.name === 'sluice process broken')!;
        expect(failed.status).toMatchObject({ code: SpanStatusCode.ERROR, message: 'broken on purpose' });
        expect(spans.find((s) => s.name === 'sluice process fine')!.status.code).not.toBe(SpanStatusCode.ERROR);

        // Only the API's context switch sits between the worker and the handler in
        // the stored stack: no span machinery (startActiveSpan and its callbacks).
        const stack = await waitFor(async () => (await queue.getJob(broken!))?.last_error, 'the stored error');
        expect(stack).toMatch(/broken on purpose/);
        expect(stack).not.toMatch(/startActiveSpan|sdk-trace-base/);
        expect(stack.split('\n').filter((line) => line.includes('@opentelemetry')).length).toBeLessThanOrEqual(2);
      },
    );
    await queue.close();
  });
});

describe('tracing: the stored trace context is bounded (migration 0047, outside review 266)', () => {
  it('a carrier past 16 KiB keeps only its traceparent; the table refuses a bigger one written by hand', async () => {
    const huge: TextMapPropagator = {
      inject: (_context, carrier, setter) => setter.set(carrier, 'baggage', `k=${'x'.repeat(20_000)}`),
      extract: (ctx) => ctx,
      fields: () => ['baggage'],
    };
    propagation.disable();
    propagation.setGlobalPropagator(new CompositePropagator({ propagators: [new W3CTraceContextPropagator(), huge] }));
    const queue = new Queue({ pool: db.pool, schema: db.schema });
    try {
      const id = await queue.enqueue('fine', {}, { queue: 'bounded' });
      const { rows } = await db.pool.query(`SELECT trace_context FROM ${db.s}.jobs WHERE id = $1`, [id]);
      expect(Object.keys(rows[0].trace_context)).toEqual(['traceparent']);
      await expect(
        db.pool.query(
          `INSERT INTO ${db.s}.jobs (queue, task, trace_context) VALUES ('bounded', 't', jsonb_build_object('traceparent', repeat('x', 20000)))`,
        ),
      ).rejects.toMatchObject({ code: '23514', constraint: 'jobs_trace_context_size' });
    } finally {
      await queue.close();
      propagation.disable();
      propagation.setGlobalPropagator(new W3CTraceContextPropagator());
    }
  });
});

describe("tracing: a run's span ends with its job's outcome (outside review 258)", () => {
  it('a timeout is an error also when the handler ignores its signal; a snooze, a cancel are not', async () => {
    exporter.reset();
    const queue = new Queue({ pool: db.pool, schema: db.schema });
    let snoozed = false;
    let cancelMe!: () => void;
    const running = new Promise<void>((resolve) => (cancelMe = resolve));
    await withWorker(
      {
        queues: ['outcomes'],
        tasks: {
          // Returns normally after its timeout: the job fails all the same.
          deaf: { timeoutMs: 100, maxAttempts: 1, handler: () => new Promise((resolve) => setTimeout(resolve, 400)) },
          sleepy: () => {
            if (snoozed) return;
            snoozed = true;
            throw new Snooze(10);
          },
          // Cancelled while it runs; returns once aborted, as a handler honouring its signal does.
          doomed: (_p: unknown, { signal }) => {
            cancelMe();
            return new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
          },
        },
      },
      async () => {
        const deaf = await queue.enqueue('deaf', {}, { queue: 'outcomes' });
        const sleepy = await queue.enqueue('sleepy', {}, { queue: 'outcomes' });
        const doomed = await queue.enqueue('doomed', {}, { queue: 'outcomes' });
        await running;
        await queue.cancel(doomed);
        const spansOf = (id: string) =>
          exporter.getFinishedSpans().filter((s) => s.kind === SpanKind.CONSUMER && s.attributes['messaging.message.id'] === id);
        await waitFor(
          () => spansOf(deaf).length === 1 && spansOf(sleepy).length === 2 && spansOf(doomed).length === 1,
          'the spans of every run',
        );
        expect(await waitFor(async () => (await queue.getJob(deaf))?.status === 'failed', 'the timed-out job failed')).toBe(true);
        expect(spansOf(deaf)[0]!.status).toMatchObject({
          code: SpanStatusCode.ERROR,
          message: 'task "deaf" timed out after 100 ms',
        });
        const [snooze, run] = spansOf(sleepy);
        expect(snooze!.status.code).not.toBe(SpanStatusCode.ERROR);
        expect(snooze!.attributes['sluice.outcome']).toBe('snoozed');
        expect(run!.status.code).not.toBe(SpanStatusCode.ERROR);
        expect(run!.attributes['sluice.outcome']).toBeUndefined();
        expect(spansOf(doomed)[0]!.status.code).not.toBe(SpanStatusCode.ERROR);
        expect(spansOf(doomed)[0]!.attributes['sluice.outcome']).toBe('cancelled');
      },
    );
    await queue.close();
  });
});

describe('events', () => {
  it("the leader tells 'tasks:unhandled' of due jobs no live worker handles, with no logger (outside review 273)", async () => {
    const queue = new Queue({ pool: db.pool, schema: db.schema });
    await queue.enqueue('mispelt', {}, { queue: 'unhandled-q' });
    await queue.enqueue('mispelt', {}, { queue: 'unhandled-q' });
    const told: unknown[] = [];
    await withWorker({ queues: ['unhandled-q'], tasks: { misspelt: async () => {} } }, async (worker) => {
      worker.on('tasks:unhandled', (tasks) => told.push(...tasks));
      await waitFor(() => told.length > 0, "the leader's report", 30_000);
    });
    expect(told).toEqual([{ queue: 'unhandled-q', task: 'mispelt', jobs: 2, oldestMs: expect.any(Number) }]);
    await db.pool.query(`DELETE FROM ${db.s}.jobs WHERE queue = 'unhandled-q'`);
  });
});

describe('logging', () => {
  it('a logger that throws is contained: its jobs run, and a warning per level says so (outside review 279: an uncaught exception)', async () => {
    const warnings = captureWarnings('SLUICE_LOGGER');
    const broken = () => {
      throw new Error('transport gone');
    };
    // An async method's rejection too (outside review 280).
    const rejects = async () => Promise.reject(new Error('transport gone'));
    const logger = { debug: rejects, info: broken, warn: broken, error: broken };
    const queue = new Queue({ pool: db.pool, schema: db.schema });
    const ran: number[] = [];
    const tasks = {
      t: (p: { n: number }) => void ran.push(p.n),
      fails: () => {
        throw new Error('fails');
      },
    };
    try {
      await withWorker({ queues: ['badly-logged'], logger, tasks }, async () => {
        for (const n of [1, 2, 3]) await queue.enqueue('t', { n }, { queue: 'badly-logged' });
        // Its failure is logged at warn, which throws: the async debug() and a throwing method both met.
        const failing = await queue.enqueue('fails', {}, { queue: 'badly-logged', maxAttempts: 1 });
        await waitFor(() => ran.length === 3, 'the three jobs to run');
        await waitFor(async () => (await queue.getJob(failing))?.status === 'failed', 'the failing job to fail');
      });
      const said = await warnings.settled();
      // Logged at debug: each job's start and end; at warn: the failure.
      expect(said).toContain("sluice: the logger's debug() threw or rejected (said once per level): transport gone");
      expect(said).toContain("sluice: the logger's warn() threw or rejected (said once per level): transport gone");
      expect(new Set(said).size).toBe(said.length);
    } finally {
      warnings.stop();
    }
  });

  it('writes structured lines through a pluggable logger; a pino logger fits as is', async () => {
    const lines: Record<string, unknown>[] = [];
    const sink = new Writable({
      write(chunk, _enc, done) {
        for (const line of String(chunk).split('\n').filter(Boolean)) lines.push(JSON.parse(line));
        done();
      },
    });
    const logger = pino({ level: 'debug' }, sink);
    const queue = new Queue({ pool: db.pool, schema: db.schema });
    await withWorker(
      {
        queues: ['logged'],
        workerId: 'logged-worker',
        logger,
        tasks: {
          flaky: async () => {
            throw new Error('flaky failed');
          },
          // Cancelled while it runs (outside review 258: no line said so).
          held: (_p: unknown, { signal }) => new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true })),
        },
      },
      async () => {
        const held = await queue.enqueue('held', {}, { queue: 'logged' });
        await waitFor(() => lines.some((l) => l.msg === 'job started' && l.jobId === held), 'the held job started');
        await queue.cancel(held);
        await waitFor(() => lines.some((l) => l.msg === 'job cancelled while it ran' && l.jobId === held), 'the cancel logged');
        expect(lines.find((l) => l.msg === 'job cancelled while it ran')).toMatchObject({ level: 30, task: 'held' });
        const id = await queue.enqueue('flaky', {}, { queue: 'logged', maxAttempts: 1 });
        await waitFor(() => lines.some((l) => l.msg === 'job failed' && l.jobId === id), 'the failure to be logged');
        const failure = lines.find((l) => l.msg === 'job failed')!;
        expect(failure).toMatchObject({ level: 40, worker: 'logged-worker', task: 'flaky', queue: 'logged', willRetry: false });
        expect((failure.err as { message: string }).message).toBe('flaky failed');
        expect(lines.some((l) => l.msg === 'job started' && l.level === 20 && l.jobId === id)).toBe(true);
        // The election may come after the job, on a loaded machine.
        await waitFor(() => lines.some((l) => l.msg === 'elected maintenance leader' && l.level === 30), 'the election logged');
      },
    );
    await queue.close();
  });
});
