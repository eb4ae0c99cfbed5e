import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { hostname } from 'node:os';
import type { SluiceMetrics } from './metrics.js';
import { checkListenHost, listenError } from '../listen-error.js';

const METRICS_PATH = '/metrics';

export interface MetricsServer {
  /** The scrape URL, http://host:port/metrics: what a Prometheus scrape config (or curl) uses as is. */
  url: string;
  close(): Promise<void>;
}

/** What /metrics serves: a SluiceMetrics, or any prom-client registry's text (RelayMetrics' for `sluice relay`). */
export type MetricsSource = Pick<SluiceMetrics, 'text' | 'contentType'>;

/**
 * Serves GET /metrics (Prometheus text format) from one SluiceMetrics. One route
 * needs no web framework: node:http keeps metrics down to one optional package,
 * prom-client.
 */
export async function serveMetrics(metrics: MetricsSource, port: number, host: string): Promise<MetricsServer> {
  checkListenHost('metrics', host);
  const server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (path !== METRICS_PATH) {
      res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' }).end('not found: the metrics are at /metrics\n');
      return;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD' }).end();
      return;
    }
    metrics.text().then(
      (body) => res.writeHead(200, { 'content-type': metrics.contentType }).end(req.method === 'HEAD' ? undefined : body),
      (err: unknown) =>
        res
          .writeHead(500, { 'content-type': 'text/plain; charset=utf-8' })
          .end(`${err instanceof Error ? err.message : String(err)}\n`),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err) => reject(listenError(err, 'metrics', host, port)));
    server.listen(port, host, resolve);
  });
  const { port: actualPort } = server.address() as AddressInfo;
  return {
    url: metricsUrl(host, actualPort),
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        // Scrapers keep connections alive; close() alone would wait for them.
        server.closeAllConnections();
      }),
  };
}

/** Hosts that mean "every interface": no scraper can connect to them, so the URL names this machine instead. */
const WILDCARD_HOSTS = new Set(['', '0.0.0.0', '::', '::0', '0:0:0:0:0:0:0:0']);

/** The scrape URL for a server listening on `host`: for a wildcard host, this machine's hostname. */
export function metricsUrl(host: string, port: number): string {
  const name = WILDCARD_HOSTS.has(host) ? hostname() : host;
  return `http://${name.includes(':') ? `[${name}]` : name}:${port}${METRICS_PATH}`;
}
