import type { Queryable } from '../db/executor.js';
import type { ResolvedWorkerConfig } from './options.js';
import { logWorkerEvents } from './log-events.js';
import type { WorkerEmitter } from './events.js';

export interface Instrumentation {
  /** Where /metrics is served, when a port was configured. */
  metricsUrl: string | undefined;
  stop(): Promise<void>;
}

/**
 * Attaches what the worker's options ask for: a logger, Prometheus metrics (and
 * their HTTP endpoint), OpenTelemetry spans around handlers. prom-client and
 * fastify are imported only when metrics are configured. Everything hangs off the
 * worker's events (tracing wraps the handlers instead: see middleware.ts).
 */
export async function instrumentWorker(
  worker: WorkerEmitter,
  config: ResolvedWorkerConfig,
  db: Queryable,
): Promise<Instrumentation> {
  const detach: (() => void | Promise<void>)[] = [];
  if (config.logger) detach.push(logWorkerEvents(worker, config.workerId, config.logger));

  const undoAll = async () => {
    for (const undo of detach.splice(0).reverse()) await undo();
  };
  let metricsUrl: string | undefined;
  try {
    if (config.metrics) metricsUrl = await instrumentMetrics(config, config.metrics, db, worker, detach);
  } catch (err) {
    // A start that fails here (its port in use) leaves nothing behind: its watch of
    // the schema, kept, read a shared collector's depth through this worker's closed
    // pool, and the healthy worker's depth_up said 0 for good (outside review 279).
    await undoAll().catch(() => {});
    throw err;
  }
  return { metricsUrl, stop: undoAll };
}

/** Observes the worker into its collector and serves /metrics when a port is set; adds each undo to `detach`. */
async function instrumentMetrics(
  config: ResolvedWorkerConfig,
  options: NonNullable<ResolvedWorkerConfig['metrics']>,
  db: Queryable,
  worker: WorkerEmitter,
  detach: (() => void | Promise<void>)[],
): Promise<string | undefined> {
  const [{ SluiceMetrics }, { observeWorker }] = await Promise.all([
    import('../metrics/metrics.js'),
    import('../metrics/observe-worker.js'),
  ]);
  const metrics = options.collector ?? new SluiceMetrics();
  detach.push(observeWorker(worker, config.schema, metrics));
  metrics.watchSchema(config.schema, db, config.queues);
  detach.push(() => metrics.unwatchSchema(config.schema, db));
  if (options.port === undefined) return undefined;
  const { serveMetrics } = await import('../metrics/server.js');
  const server = await serveMetrics(metrics, options.port, options.host);
  detach.push(() => server.close());
  return server.url;
}
