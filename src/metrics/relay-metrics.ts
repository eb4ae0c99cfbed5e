import type * as PromClient from 'prom-client';
import type { OutboxLag } from '../outbox/lag.js';
import type { RelayEvents } from '../outbox/relay-events.js';
import { requirePeer } from '../optional-peer.js';
import { ConfigError } from '../errors.js';
import { checks } from '../validate.js';
import type { MetricsRegistry } from './metrics.js';
import { metricPrefix } from './metric-prefix.js';
import { metricsRegistry, registerAll } from './registry.js';

const { rejectUnknownKeys } = checks(ConfigError);

export interface RelayMetricsOptions {
  /** Register into this prom-client registry (e.g. your app's, or SluiceMetrics'). Default: a new one. */
  registry?: MetricsRegistry;
  /** Prefix of every metric name. Default 'sluice_'. */
  prefix?: string;
}

/** What RelayMetrics watches: an OutboxRelay (its events, and its lag read at scrape time). */
export interface ObservedRelay {
  /** Every series carries it: relays of several schemas may share one RelayMetrics (outside review 248). */
  readonly schema: string;
  readonly events: RelayEvents;
  lag(): Promise<OutboxLag[]>;
}

/**
 * Prometheus metrics of outbox relays (prom-client, an optional peer): messages
 * published and failures counted by this process, and at scrape time the lag of
 * every destination in messages and seconds, read from Postgres (so any relay's
 * endpoint shows the whole picture). published/s is rate(sluice_outbox_published_total[1m]).
 *
 * @example
 *   const metrics = new RelayMetrics();
 *   metrics.observe(relay);
 *   // serve metrics.registry.metrics() at /metrics
 */
export class RelayMetrics {
  readonly registry: MetricsRegistry;
  private readonly relays = new Set<ObservedRelay>();
  private readonly published: PromClient.Counter<'schema' | 'destination'>;
  private readonly failures: PromClient.Counter<'schema' | 'destination' | 'kind'>;
  private readonly deadLetters: PromClient.Counter<'schema' | 'destination'>;
  private readonly latency: PromClient.Histogram<'schema' | 'destination'>;

  constructor(options: RelayMetricsOptions = {}) {
    // A misspelt `registry` registered the metrics where nothing serves them (outside review 173).
    rejectUnknownKeys(options, new Set(['registry', 'prefix']), 'RelayMetrics');
    const client = requirePeer<typeof PromClient>('prom-client', 'RelayMetrics');
    const p = metricPrefix(options.prefix, 'RelayMetrics');
    const registry = metricsRegistry(client, options.registry, 'RelayMetrics');
    this.registry = registry;
    const made = registerAll(registry, 'RelayMetrics', () => relayMetrics(client, [registry], p, this.relays));
    this.published = made.published;
    this.failures = made.failures;
    this.deadLetters = made.deadLetters;
    this.latency = made.latency;
  }

  /** Counts this relay's events and reports its destinations' lag at scrape time. */
  observe(relay: ObservedRelay): void {
    // Observed twice, every message counted twice (outside review 173).
    if (this.relays.has(relay)) return;
    this.relays.add(relay);
    const { schema } = relay;
    relay.events.on('published', ({ destination, count, messages }) => {
      this.published.inc({ schema, destination }, count);
      const now = Date.now();
      for (const m of messages) this.latency.observe({ schema, destination }, Math.max(0, now - m.createdAt.getTime()) / 1000);
    });
    relay.events.on('failure', ({ destination, transient }) =>
      this.failures.inc({ schema, destination, kind: transient ? 'transient' : 'refused' }),
    );
    relay.events.on('deadLetter', ({ destination }) => this.deadLetters.inc({ schema, destination }));
  }
}

/** The relay's series, registered in `registers`; the lag gauges read `relays` at scrape time. */
function relayMetrics(client: typeof PromClient, registers: PromClient.Registry[], p: string, relays: Set<ObservedRelay>) {
  const made = {
    published: new client.Counter({
      name: `${p}outbox_published_total`,
      help: 'Messages this process published (acked by the broker)',
      labelNames: ['schema', 'destination'] as const,
      registers,
    }),
    failures: new client.Counter({
      name: `${p}outbox_failures_total`,
      help: 'Failed publishes: kind="transient" (broker unreachable) or "refused" (counted against the message)',
      labelNames: ['schema', 'destination', 'kind'] as const,
      registers,
    }),
    deadLetters: new client.Counter({
      name: `${p}outbox_dead_letters_total`,
      help: 'Messages this process moved to the dead letters',
      labelNames: ['schema', 'destination'] as const,
      registers,
    }),
    latency: new client.Histogram({
      name: `${p}outbox_publish_latency_seconds`,
      help: 'From the message row being written (created_at, the database clock) to the broker ack',
      labelNames: ['schema', 'destination'] as const,
      registers,
      buckets: [0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
    }),
  };
  let pending: Promise<(OutboxLag & { schema: string })[]> | undefined;
  // Both gauges come from one read per scrape, each schema's once however many of its relays are observed.
  const readAll = async () => {
    const bySchema = new Map<string, ObservedRelay[]>();
    for (const r of relays) bySchema.set(r.schema, [...(bySchema.get(r.schema) ?? []), r]);
    const all = await Promise.all([...bySchema].map(async ([schema, of]) => (await lagOf(of)).map((l) => ({ ...l, schema }))));
    return all.flat();
  };
  const read = () => (pending ??= readAll().finally(() => (pending = undefined)));
  const lagGauge = (name: string, help: string, pick: (l: OutboxLag) => number) =>
    new client.Gauge({
      name,
      help,
      labelNames: ['schema', 'destination'],
      registers,
      async collect() {
        this.reset();
        for (const l of await read()) this.set({ schema: l.schema, destination: l.destination }, pick(l));
      },
    });
  lagGauge(`${p}outbox_lag_messages`, 'Messages committed and not yet published, per destination', (l) => l.waiting);
  lagGauge(`${p}outbox_lag_seconds`, 'Age of the oldest message not yet published, per destination', (l) => l.oldestSeconds);
  return made;
}

/** The lag read through the first of `relays` that can (a stopped one cannot); none when none can. */
async function lagOf(relays: readonly ObservedRelay[]): Promise<OutboxLag[]> {
  for (const relay of relays) {
    try {
      return await relay.lag();
    } catch {
      // The next one, if any: a scrape must not fail because one relay has stopped.
    }
  }
  return [];
}
