import type * as PromClient from 'prom-client';
import { getGroupStats, queuesWithGroups, type QueueGroupStats } from '../admin/groups.js';
import type { Queryable } from '../db/executor.js';
import { ConfigError } from '../errors.js';
import { requirePeer } from '../optional-peer.js';
import { checks } from '../validate.js';
import type { SluiceMetrics } from './metrics.js';
import { metricPrefix } from './metric-prefix.js';
import { registerAll } from './registry.js';

const { checkSchemaName, intOption, rejectUnknownKeys } = checks(ConfigError);

export interface GroupMetricsOptions {
  /** Label this many groups per queue (the busiest by due jobs). Default 20: a label per group of 10,000 would swamp Prometheus. */
  top?: number;
  /** Metric name prefix. Default 'sluice_', as SluiceMetrics. */
  prefix?: string;
}

/**
 * Adds per-group gauges to `metrics`' registry, read from the database at scrape
 * time for every grouped or rate-limited queue of `schema`, and every queue with
 * grouped jobs waiting that no worker has claimed yet:
 * - `sluice_queue_groups{schema,queue}`: groups with pending or running jobs;
 * - `sluice_queue_throttled{schema,queue}`: 1 when the queue's own limit holds every due job back;
 * - `sluice_queue_groups_throttled{schema,queue}`: groups whose due jobs their
 *   concurrency or rate limit holds back now;
 * - `sluice_group_jobs{schema,queue,group,state}`: due and running jobs of the
 *   `top` busiest groups (group "" for the jobs without one).
 * - `sluice_group_stats_up{schema}`: 1 when the scrape read them, 0 when it could
 *   not (the series above are then absent).
 * One scrape reads each grouped queue's pending jobs once (see getGroupStats).
 * Options are checked here, not at the first scrape: a bad one used to fail every
 * read, and the read's failure only left the series out (outside review 181).
 * Several schemas may be watched into one registry (a second call with another
 * schema was prom-client's "already registered", outside review 245); a schema
 * watched again takes the newer `db` and `top`.
 *
 * @example
 *   const metrics = new SluiceMetrics();
 *   watchGroups(metrics, 'sluice', pool, { top: 10 });
 */
export function watchGroups(metrics: SluiceMetrics, schema: string, db: Queryable, options: GroupMetricsOptions = {}): void {
  rejectUnknownKeys(options, new Set(['top', 'prefix']), 'watchGroups');
  checkSchemaName(schema);
  const p = metricPrefix(options.prefix, 'watchGroups');
  const top = intOption('top', options.top, 20, 1, 10_000);
  const client = requirePeer<typeof PromClient>('prom-client', 'watchGroups');
  const registry = metrics.registry as PromClient.Registry;
  let byPrefix = watched.get(registry);
  if (!byPrefix) watched.set(registry, (byPrefix = new Map()));
  let sources = byPrefix.get(p);
  if (!sources) {
    const fresh = new Map<string, GroupSource>();
    registerAll(registry, 'watchGroups', () => groupGauges(client, [registry], p, fresh));
    byPrefix.set(p, (sources = fresh));
  }
  sources.set(schema, { db, top });
}

interface GroupSource {
  db: Queryable;
  top: number;
}

/** The schemas whose groups each registry reports, per metric prefix. */
const watched = new WeakMap<PromClient.Registry, Map<string, Map<string, GroupSource>>>();

function groupGauges(client: typeof PromClient, registers: PromClient.Registry[], p: string, sources: Map<string, GroupSource>) {
  // The gauges are collected in one scrape: they share one read, forgotten once it
  // settles so the following scrape reads afresh (see depthGauges). Undefined
  // for a schema: its read failed.
  let pending: Promise<Map<string, QueueGroupStats[] | undefined>> | undefined;
  const readAll = async () => {
    const read = await Promise.all(
      [...sources].map(async ([schema, { db, top }]) => [schema, await readGroups(db, schema, top)] as const),
    );
    return new Map(read);
  };
  const read = () => (pending ??= readAll().finally(() => (pending = undefined)));
  const gauge = (
    name: string,
    help: string,
    labelNames: string[],
    fill: (g: PromClient.Gauge, schema: string, s: QueueGroupStats) => void,
  ) =>
    new client.Gauge({
      name,
      help,
      labelNames: ['schema', 'queue', ...labelNames],
      registers,
      async collect() {
        this.reset();
        for (const [schema, stats] of await read()) for (const queue of stats ?? []) fill(this, schema, queue);
      },
    });
  gauge(`${p}queue_groups`, 'Groups of a queue with pending or running jobs', [], (g, schema, s) =>
    g.set({ schema, queue: s.queue }, s.groups),
  );
  gauge(`${p}queue_groups_throttled`, 'Groups whose due jobs their concurrency or rate limit holds back', [], (g, schema, s) =>
    g.set({ schema, queue: s.queue }, s.throttled),
  );
  gauge(
    `${p}queue_throttled`,
    "1 when the queue's own concurrency or rate limit holds every due job back now",
    [],
    (g, schema, s) => g.set({ schema, queue: s.queue }, s.queueThrottled ? 1 : 0),
  );
  new client.Gauge({
    name: `${p}group_stats_up`,
    help: "1 when this scrape read the groups from the schema's database, 0 when it could not (the group series are then absent)",
    labelNames: ['schema'],
    registers,
    async collect() {
      this.reset();
      for (const [schema, stats] of await read()) this.set({ schema }, stats ? 1 : 0);
    },
  });
  gauge(`${p}group_jobs`, 'Due and running jobs of the busiest groups of a queue', ['group', 'state'], (g, schema, s) => {
    for (const group of s.top) {
      g.set({ schema, queue: s.queue, group: group.group ?? '', state: 'due' }, group.due);
      g.set({ schema, queue: s.queue, group: group.group ?? '', state: 'running' }, group.running);
    }
  });
}

async function readGroups(db: Queryable, schema: string, top: number): Promise<QueueGroupStats[] | undefined> {
  try {
    const queues = await queuesWithGroups(db, schema, { rateLimited: true });
    return await Promise.all(queues.map((name) => getGroupStats(db, schema, name, { limit: top })));
  } catch {
    // A scrape must not fail because the database is briefly away: the gauges are
    // absent, and group_stats_up says why.
    return undefined;
  }
}
