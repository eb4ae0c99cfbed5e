import { ConfigError } from '../errors.js';
import { checks } from '../validate.js';
import type { SluiceMetrics } from './metrics.js';

const { intOption, rejectUnknownKeys } = checks(ConfigError);

/** The worker's `metrics` option. Nothing is loaded or served unless it is given. */
export interface WorkerMetricsOptions {
  /** Serve GET /metrics on this port (0: any free port; see `worker.metricsUrl`). Omit to serve nothing. */
  port?: number | undefined;
  /** Interface to listen on. Default '127.0.0.1'; '0.0.0.0' to be scraped from other hosts. */
  host?: string | undefined;
  /** Record into this SluiceMetrics (share one with your Queue, or serve its registry yourself). */
  collector?: SluiceMetrics | undefined;
}

export interface ResolvedMetricsOptions {
  port: number | undefined;
  host: string;
  collector: SluiceMetrics | undefined;
}

export function resolveMetricsOptions(options: WorkerMetricsOptions | undefined): ResolvedMetricsOptions | undefined {
  if (options === undefined) return undefined;
  if (typeof options !== 'object' || options === null) throw new ConfigError('metrics must be an object');
  rejectUnknownKeys(options, new Set(['port', 'host', 'collector']), 'metrics');
  // `metrics: {}` (or a port left undefined) read as "metrics on" and served nothing (outside review 245).
  if (options.port === undefined && options.collector === undefined) {
    throw new ConfigError('metrics: give a port to serve them, or a collector to record into (neither turns nothing on)');
  }
  if (options.host !== undefined && (typeof options.host !== 'string' || options.host === '')) {
    throw new ConfigError('metrics.host must be a non-empty string');
  }
  if (options.collector !== undefined && typeof (options.collector as { text?: unknown }).text !== 'function') {
    throw new ConfigError('metrics.collector must be a SluiceMetrics');
  }
  return {
    port: options.port === undefined ? undefined : intOption('metrics.port', options.port, 0, 0, 65_535),
    host: options.host ?? '127.0.0.1',
    collector: options.collector,
  };
}
