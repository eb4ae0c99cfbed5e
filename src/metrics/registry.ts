import type * as PromClient from 'prom-client';
import { ConfigError } from '../errors.js';

/**
 * The `registry` option of the metrics classes: the one given, checked, or a new
 * one. Anything else failed inside prom-client with a TypeError ("registerMetric is
 * not a function", outside review 245).
 */
export function metricsRegistry(client: typeof PromClient, given: unknown, owner: string): PromClient.Registry {
  if (given === undefined) return new client.Registry();
  const registry = given as Partial<PromClient.Registry> | null;
  if (
    typeof registry !== 'object' ||
    registry === null ||
    typeof registry.registerMetric !== 'function' ||
    typeof registry.getMetricsAsArray !== 'function' ||
    typeof registry.removeSingleMetric !== 'function'
  ) {
    throw new ConfigError(`${owner}: registry must be a prom-client Registry`);
  }
  return given as PromClient.Registry;
}

/**
 * Registers a set of metrics as one: `build` creates them in `registry`, and when
 * one of its names is taken there (a second SluiceMetrics on one registry, a
 * hot reload), the ones it made already are removed again and the error is a
 * ConfigError (prom-client throws a plain Error, outside review 245).
 */
export function registerAll<T>(registry: PromClient.Registry, owner: string, build: () => T): T {
  const before = new Set(registry.getMetricsAsArray().map((metric) => metric.name));
  try {
    return build();
  } catch (err) {
    for (const metric of registry.getMetricsAsArray()) {
      if (!before.has(metric.name)) registry.removeSingleMetric(metric.name);
    }
    const message = (err instanceof Error ? err.message : String(err)).replace(/\.$/, '');
    const taken = /already been registered/.test(message)
      ? ` in this registry (one ${owner} per registry and prefix: reuse it, or give another a prefix of its own)`
      : '';
    throw new ConfigError(`${owner}: ${message}${taken}`, { cause: err });
  }
}
