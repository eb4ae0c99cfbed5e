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
  private readonly published: PromClient.Counter<'destination'>;
  private readonly failures: PromClient.Counter<'destination' | 'kind'>;
  private readonly deadLetters: PromClient.Counter<'destination'>;
  private readonly latency: PromClient.Histogram<'destination'>;

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
    relay.events.on('published', ({ destination, count, messages }) => {
      this.published.inc({ destination }, count);
      const now = Date.now();
      for (const m of messages) this.latency.observe({ destination }, Math.max(0, now - m.createdAt.getTime()) / 1000);
    });
    relay.events.on('failure', ({ destination, transient }) =>
      this.failures.inc({ destination, kind: transient ? 'transient' : 'refused' }),
    );
    relay.events.on('deadLetter', ({ destination }) => this.deadLetters.inc({ destination }));
  }
}

/** The relay's series, registered in `registers`; the lag gauges read `relays` at scrape time. */
function relayMetrics(client: typeof PromClient, registers: PromClient.Registry[], p: string, relays: Set<ObservedRelay>) {
  const made = {
    published: new client.Counter({
      name: `${p}outbox_published_total`,
      help: 'Messages this process published (acked by the broker)',
      labelNames: ['destination'] as const,
      registers,
    }),
    failures: new client.Counter({
      name: `${p}outbox_failures_total`,
      help: 'Failed publishes: kind="transient" (broker unreachable) or "refused" (counted against the message)',
      labelNames: ['destination', 'kind'] as const,
      registers,
    }),
    deadLetters: new client.Counter({
      name: `${p}outbox_dead_letters_total`,
      help: 'Messages this process moved to the dead letters',
      labelNames: ['destination'] as const,
      registers,
    }),
    latency: new client.Histogram({
      name: `${p}outbox_publish_latency_seconds`,
      help: 'From the message row being written (created_at, the database clock) to the broker ack',
      labelNames: ['destination'] as const,
      registers,
      buckets: [0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
    }),
  };
  let pending: Promise<OutboxLag[]> | undefined;
  // Both gauges come from one read per scrape.
  const read = () =>
    (pending ??= Promise.all([...relays].map((r) => r.lag().catch(() => [])))
      .then((all) => [...new Map(all.flat().map((l) => [l.destination, l])).values()])
      .finally(() => (pending = undefined)));
  const lagGauge = (name: string, help: string, pick: (l: OutboxLag) => number) =>
    new client.Gauge({
      name,
      help,
      labelNames: ['destination'],
      registers,
      async collect() {
        this.reset();
        for (const l of await read()) this.set({ destination: l.destination }, pick(l));
      },
    });
  lagGauge(`${p}outbox_lag_messages`, 'Messages committed and not yet published, per destination', (l) => l.waiting);
  lagGauge(`${p}outbox_lag_seconds`, 'Age of the oldest message not yet published, per destination', (l) => l.oldestSeconds);
  return made;
}
