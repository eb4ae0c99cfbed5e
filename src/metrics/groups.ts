import type * as PromClient from 'prom-client';
import { getGroupStats, queuesWithGroups, type QueueGroupStats } from '../admin/groups.js';
import type { Queryable } from '../db/executor.js';
import { requirePeer } from '../optional-peer.js';
import type { SluiceMetrics } from './metrics.js';

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
 * - `sluice_queue_groups_throttled{schema,queue}`: groups whose due jobs their
 *   concurrency or rate limit holds back now;
 * - `sluice_group_jobs{schema,queue,group,state}`: due and running jobs of the
 *   `top` busiest groups (group "" for the jobs without one).
 * One scrape reads each grouped queue's pending jobs once (see getGroupStats).
 *
 * @example
 *   const metrics = new SluiceMetrics();
 *   watchGroups(metrics, 'sluice', pool, { top: 10 });
 */
export function watchGroups(metrics: SluiceMetrics, schema: string, db: Queryable, options: GroupMetricsOptions = {}): void {
  const client = requirePeer<typeof PromClient>('prom-client', 'watchGroups');
  const p = options.prefix ?? 'sluice_';
  const top = options.top ?? 20;
  const registers = [metrics.registry as PromClient.Registry];
  // The three gauges are collected in one scrape: they share one read, forgotten
  // on the next turn of the event loop so the following scrape reads afresh.
  let pending: Promise<QueueGroupStats[]> | undefined;
  const read = () => (pending ??= readGroups(db, schema, top).finally(() => setTimeout(() => (pending = undefined), 0)));
  const gauge = (name: string, help: string, labelNames: string[], fill: (g: PromClient.Gauge, s: QueueGroupStats) => void) =>
    new client.Gauge({
      name,
      help,
      labelNames: ['schema', 'queue', ...labelNames],
      registers,
      async collect() {
        this.reset();
        for (const stats of await read()) fill(this, stats);
      },
    });
  gauge(`${p}queue_groups`, 'Groups of a queue with pending or running jobs', [], (g, s) =>
    g.set({ schema, queue: s.queue }, s.groups),
  );
  gauge(`${p}queue_groups_throttled`, 'Groups whose due jobs their concurrency or rate limit holds back', [], (g, s) =>
    g.set({ schema, queue: s.queue }, s.throttled),
  );
  gauge(`${p}group_jobs`, 'Due and running jobs of the busiest groups of a queue', ['group', 'state'], (g, s) => {
    for (const group of s.top) {
      g.set({ schema, queue: s.queue, group: group.group ?? '', state: 'due' }, group.due);
      g.set({ schema, queue: s.queue, group: group.group ?? '', state: 'running' }, group.running);
    }
  });
}

async function readGroups(db: Queryable, schema: string, top: number): Promise<QueueGroupStats[]> {
  try {
    const queues = await queuesWithGroups(db, schema, { rateLimited: true });
    return await Promise.all(queues.map((name) => getGroupStats(db, schema, name, { limit: top })));
  } catch {
    // A scrape must not fail because the database is briefly away; the gauges are just absent.
    return [];
  }
}
