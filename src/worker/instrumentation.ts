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

  let metricsUrl: string | undefined;
  if (config.metrics) {
    const [{ SluiceMetrics }, { observeWorker }] = await Promise.all([
      import('../metrics/metrics.js'),
      import('../metrics/observe-worker.js'),
    ]);
    const metrics = config.metrics.collector ?? new SluiceMetrics();
    detach.push(observeWorker(worker, config.schema, metrics));
    metrics.watchSchema(config.schema, db, config.queues);
    detach.push(() => metrics.unwatchSchema(config.schema, db));
    if (config.metrics.port !== undefined) {
      const { serveMetrics } = await import('../metrics/server.js');
      const server = await serveMetrics(metrics, config.metrics.port, config.metrics.host);
      metricsUrl = server.url;
      detach.push(() => server.close());
    }
  }
  return {
    metricsUrl,
    stop: async () => {
      for (const undo of detach.reverse()) await undo();
    },
  };
}
