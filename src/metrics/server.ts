import Fastify, { type FastifyInstance } from 'fastify';
import type { SluiceMetrics } from './metrics.js';

export interface MetricsServer {
  /** http://host:port of the listening server. */
  url: string;
  close(): Promise<void>;
}

/** Serves GET /metrics (Prometheus text format) from one SluiceMetrics. */
export async function serveMetrics(metrics: SluiceMetrics, port: number, host: string): Promise<MetricsServer> {
  const app: FastifyInstance = Fastify({ logger: false });
  app.get('/metrics', async (_request, reply) => {
    reply.header('content-type', metrics.contentType);
    return metrics.text();
  });
  await app.listen({ port, host });
  const address = app.server.address();
  const actualPort = typeof address === 'object' && address ? address.port : port;
  return {
    url: `http://${host.includes(':') ? `[${host}]` : host}:${actualPort}`,
    close: () => app.close(),
  };
}
