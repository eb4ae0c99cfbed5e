import { ConfigError } from '../errors.js';

/** What Prometheus allows at the start of a metric name (prom-client throws a plain Error otherwise). */
const METRIC_PREFIX = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;

/** The `prefix` option of the metrics classes: 'sluice_' by default, else a valid metric name start. */
export function metricPrefix(prefix: unknown, what: string): string {
  if (prefix === undefined) return 'sluice_';
  if (typeof prefix !== 'string' || !METRIC_PREFIX.test(prefix)) {
    throw new ConfigError(
      `${what}: prefix must start a Prometheus metric name (letters, digits, _ and :, not starting with a digit), got ${JSON.stringify(prefix) ?? String(prefix)}`,
    );
  }
  return prefix;
}
