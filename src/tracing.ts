import type * as OtelApi from '@opentelemetry/api';
import { JobCancelledError, Snooze, WorkerStoppingError } from './errors.js';
import type { JobRow, TaskHandler } from './job.js';

/**
 * OpenTelemetry, when the application has it. `@opentelemetry/api` is an optional
 * peer dependency loaded once, lazily: without it nothing is wrapped and enqueue
 * sends NULL, so tracing costs nothing. With it but no SDK registered, handlers
 * are not wrapped, enqueue's spans are the API's no-ops and no context is stored.
 */
type Api = typeof OtelApi;

let loading: Promise<Api | undefined> | undefined;
/** What loadApi() found, once it has: read without waiting (see traceEnqueue). */
let loaded: { api: Api | undefined } | undefined;

function loadApi(): Promise<Api | undefined> {
  loading ??= import('@opentelemetry/api').then(
    (api) => {
      loaded = { api };
      return api;
    },
    () => {
      loaded = { api: undefined };
      return undefined;
    },
  );
  return loading;
}

/** Starts loading the tracing API (a Queue does, when made), so that enqueues need not wait for it. */
export function preloadTracing(): void {
  void loadApi();
}

/** W3C trace context as stored in jobs.trace_context. */
export type TraceCarrier = Record<string, string>;

const SYSTEM = 'sluice';

/**
 * Runs `insert` inside a PRODUCER span "sluice enqueue <task>" and hands it the
 * span's context to store with the job(s), or null when there is nothing to carry.
 * `task` undefined: a batch of several tasks, whose span is "sluice enqueue" and says
 * no task (it said "batch", a task name as good as any; outside review 249).
 */
export function traceEnqueue<T>(
  queue: string,
  task: string | undefined,
  count: number,
  insert: (carrier: string | null) => Promise<T>,
): Promise<T> {
  // Once the API is loaded, `insert` is called before this returns: its statement
  // is on your client before any statement you send after calling enqueue(), a
  // ROLLBACK included. Waiting for the loaded API first, an enqueue not awaited
  // reached the client after the ROLLBACK and committed on its own.
  if (loaded) return traced(loaded.api, queue, task, count, insert);
  return loadApi().then((api) => traced(api, queue, task, count, insert));
}

async function traced<T>(
  api: Api | undefined,
  queue: string,
  task: string | undefined,
  count: number,
  insert: (carrier: string | null) => Promise<T>,
): Promise<T> {
  if (!api) return insert(null);
  const tracer = api.trace.getTracer(SYSTEM);
  const span = tracer.startSpan(task === undefined ? `${SYSTEM} enqueue` : `${SYSTEM} enqueue ${task}`, {
    kind: api.SpanKind.PRODUCER,
    attributes: {
      'messaging.system': SYSTEM,
      'messaging.operation.type': 'send',
      'messaging.destination.name': queue,
      'messaging.batch.message_count': count,
      ...(task === undefined ? {} : { 'sluice.task': task }),
    },
  });
  const carrier: TraceCarrier = {};
  api.propagation.inject(api.trace.setSpan(api.context.active(), span), carrier);
  try {
    const result = await insert(carrierText(carrier));
    if (count === 1 && typeof result === 'string') span.setAttribute('messaging.message.id', result);
    return result;
  } catch (err) {
    fail(api, span, err);
    throw err;
  } finally {
    span.end();
  }
}

/**
 * The most a job's trace_context may hold, as JSON (migration 0047): traceparent,
 * tracestate (512 bytes) and baggage (8 KiB) fit with room to spare.
 */
const MAX_TRACE_CONTEXT_BYTES = 16_384;

/**
 * The carrier as stored, or null when empty. One past the column's limit (baggage a
 * propagator filled beyond its own limit) keeps only the link to the parent span:
 * the enqueue goes through, where the whole carrier would have been refused.
 */
function carrierText(carrier: TraceCarrier): string | null {
  if (Object.keys(carrier).length === 0) return null;
  const text = JSON.stringify(carrier);
  if (Buffer.byteLength(text) <= MAX_TRACE_CONTEXT_BYTES) return text;
  const link = carrier.traceparent === undefined ? null : JSON.stringify({ traceparent: carrier.traceparent });
  return link !== null && Buffer.byteLength(link) <= MAX_TRACE_CONTEXT_BYTES ? link : null;
}

/**
 * The registered SDK's tracer, or undefined when no tracer provider is registered.
 * Until an SDK registers one, the API's global provider is a proxy without a
 * delegate that hands out no-op tracers: spans that record nothing, yet whose
 * wrapper frames would sit in every stored stack.
 */
function registeredTracer(api: Api): OtelApi.Tracer | undefined {
  const provider: OtelApi.TracerProvider & { getDelegateTracer?(name: string): OtelApi.Tracer | undefined } =
    api.trace.getTracerProvider();
  // Duck-typed, not instanceof: the proxy may come from another copy of the API package.
  return typeof provider.getDelegateTracer === 'function' ? provider.getDelegateTracer(SYSTEM) : provider.getTracer(SYSTEM);
}

/**
 * Wraps a handler so each run is a CONSUMER span "sluice process <task>", child
 * of the enqueuing span when the job carries its context, and active while the
 * handler runs (the handler's own spans nest under it). Returns the handler
 * unchanged when OpenTelemetry is not installed or no tracer provider is
 * registered at start-up, so stored stacks carry no OpenTelemetry frames then.
 */
export async function traceHandler(task: string, handler: TaskHandler): Promise<TaskHandler> {
  const api = await loadApi();
  const tracer = api && registeredTracer(api);
  if (!api || !tracer) return handler;
  return (payload, ctx) => {
    const job = ctx.job as JobRow & { trace_context?: TraceCarrier | null };
    const parent = job.trace_context ? api.propagation.extract(api.ROOT_CONTEXT, job.trace_context) : api.context.active();
    const span = tracer.startSpan(
      `${SYSTEM} process ${task}`,
      {
        kind: api.SpanKind.CONSUMER,
        attributes: {
          'messaging.system': SYSTEM,
          'messaging.operation.type': 'process',
          'messaging.destination.name': job.queue,
          'messaging.message.id': job.id,
          'sluice.task': task,
          'sluice.attempt': ctx.attempt,
        },
      },
      parent,
    );
    const failed = (err: unknown) => {
      ended(api, span, ctx.signal, { error: err });
      throw err;
    };
    // context.with calls the handler itself (no closure of ours, no startActiveSpan):
    // the fewest frames between the worker and the handler in a stored stack.
    let running: unknown;
    try {
      running = api.context.with(api.trace.setSpan(parent, span), handler, undefined, payload, ctx);
    } catch (err) {
      return failed(err);
    }
    return Promise.resolve(running).then((result) => {
      ended(api, span, ctx.signal);
      return result;
    }, failed);
  };
}

/**
 * Ends a run's span with the job's outcome: the worker's abort when there was one
 * (a timeout fails the job even when its handler ignored the signal and returned:
 * outside review 258 saw that span end OK), else what the handler threw, if it
 * did. A snooze, a cancel and a stop's abort are not the job's failures: they are
 * told by `sluice.outcome`, not as an error.
 */
function ended(api: Api, span: OtelApi.Span, signal: AbortSignal, thrown?: { error: unknown }): void {
  const error: unknown = signal.aborted ? signal.reason : thrown?.error;
  const outcome =
    error instanceof Snooze
      ? 'snoozed'
      : error instanceof JobCancelledError
        ? 'cancelled'
        : error instanceof WorkerStoppingError
          ? 'stopped'
          : undefined;
  if (outcome) span.setAttribute('sluice.outcome', outcome);
  else if (signal.aborted || thrown) fail(api, span, error);
  span.end();
}

function fail(api: Api, span: OtelApi.Span, err: unknown): void {
  span.recordException(err instanceof Error ? err : String(err));
  span.setStatus({ code: api.SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) });
}
