import type * as PromClient from 'prom-client';
import type { Queryable } from '../db/executor.js';
import { metricsStatements } from '../db/statements/metrics.js';
import { requirePeer } from '../optional-peer.js';
import { timeLimit } from '../lifecycle/time-limit.js';
import { ConfigError } from '../errors.js';
import { checks } from '../validate.js';
import { metricPrefix } from './metric-prefix.js';

const { rejectUnknownKeys } = checks(ConfigError);

// The public types below are the parts of prom-client's that Sluice uses, written
// out rather than imported: prom-client is optional, and a declaration file that
// imports a missing package fails the application's `tsc` (skipLibCheck: false).
// prom-client's own Registry, Counter, Histogram and Gauge fit them.

type Labels<T extends string> = Partial<Record<T, string | number>>;

/** A prom-client Registry (yours, or the one SluiceMetrics made). */
export interface MetricsRegistry {
  metrics(): Promise<string>;
  readonly contentType: string;
}

export interface MetricsCounter<T extends string> {
  inc(labels: Labels<T>, value?: number): void;
  inc(value?: number): void;
}

export interface MetricsHistogram<T extends string> {
  observe(labels: Labels<T>, value: number): void;
  observe(value: number): void;
}

export interface MetricsGauge<T extends string> {
  set(labels: Labels<T>, value: number): void;
  set(value: number): void;
}

export interface SluiceMetricsOptions {
  /** Register into this prom-client registry (e.g. your app's). Default: a new one. */
  registry?: MetricsRegistry;
  /** Prefix of every metric name. Default 'sluice_'. */
  prefix?: string;
  /** Run-time histogram buckets in seconds. */
  durationBuckets?: number[];
}

interface DepthRow {
  queue: string;
  due: number;
  scheduled: number;
  processing: number;
  oldest_due_seconds: number;
}

/**
 * Sluice's Prometheus metrics (prom-client). prom-client is an optional peer
 * dependency (`npm install prom-client`), loaded by the first SluiceMetrics, so
 * `import 'sluice'` costs nothing to applications without metrics. Pass one instance to your Queue
 * (enqueue counts) and your Worker (`metrics: { port, collector }`) to serve them
 * together, or register them into your own registry and serve it yourself.
 *
 * @example
 *   const metrics = new SluiceMetrics();
 *   const queue = new Queue({ connectionString, metrics });
 *   const worker = new Worker({ connectionString, tasks, metrics: { port: 9464, collector: metrics } });
 *   // curl http://127.0.0.1:9464/metrics
 */
export class SluiceMetrics {
  readonly registry: MetricsRegistry;
  readonly enqueued: MetricsCounter<'queue' | 'task'>;
  readonly completed: MetricsCounter<'queue' | 'task'>;
  readonly failed: MetricsCounter<'queue' | 'task' | 'final'>;
  readonly duration: MetricsHistogram<'queue' | 'task' | 'outcome'>;
  readonly wait: MetricsHistogram<'queue' | 'task'>;
  readonly claimBatch: MetricsHistogram<string>;
  readonly running: MetricsGauge<string>;
  readonly leader: MetricsGauge<string>;
  readonly rescued: MetricsCounter<'queue'>;
  readonly pruned: MetricsCounter<'mode'>;
  private readonly depthSources = new Map<string, Queryable>();
  /** Queues each schema's reads have shown so far (see readDepth). */
  private readonly depthSeen = new Map<string, Set<string>>();

  constructor(options: SluiceMetricsOptions = {}) {
    rejectUnknownKeys(options, new Set(['registry', 'prefix', 'durationBuckets']), 'SluiceMetrics');
    const client = requirePeer<typeof PromClient>('prom-client', 'SluiceMetrics');
    const p = metricPrefix(options.prefix, 'SluiceMetrics');
    const registry = (options.registry as PromClient.Registry | undefined) ?? new client.Registry();
    this.registry = registry;
    const registers = [registry];
    this.enqueued = new client.Counter({
      name: `${p}jobs_enqueued_total`,
      help: 'Jobs inserted by this process (counted when the INSERT succeeds, even if your transaction later rolls back)',
      labelNames: ['queue', 'task'],
      registers,
    });
    this.completed = new client.Counter({
      name: `${p}jobs_completed_total`,
      help: 'Jobs completed by this worker',
      labelNames: ['queue', 'task'],
      registers,
    });
    this.failed = new client.Counter({
      name: `${p}jobs_failed_total`,
      help: 'Failed attempts; final="true" when no retry is left',
      labelNames: ['queue', 'task', 'final'],
      registers,
    });
    this.duration = new client.Histogram({
      name: `${p}job_duration_seconds`,
      help: 'Handler run time',
      labelNames: ['queue', 'task', 'outcome'],
      registers,
      buckets: options.durationBuckets ?? [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
    });
    this.wait = new client.Histogram({
      name: `${p}job_wait_seconds`,
      help: 'From run_at (when the job became due) to its start',
      labelNames: ['queue', 'task'],
      registers,
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800],
    });
    this.claimBatch = new client.Histogram({
      name: `${p}claim_batch_size`,
      help: 'Jobs taken by one claim statement (non-empty claims)',
      registers,
      buckets: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000],
    });
    this.running = new client.Gauge({ name: `${p}jobs_running`, help: 'Jobs running in this worker now', registers });
    this.leader = new client.Gauge({
      name: `${p}maintenance_leader`,
      help: '1 while this worker is the maintenance leader',
      registers,
    });
    this.rescued = new client.Counter({
      name: `${p}jobs_rescued_total`,
      help: 'Jobs taken back from dead workers by this leader',
      labelNames: ['queue'],
      registers,
    });
    this.pruned = new client.Counter({
      name: `${p}jobs_pruned_total`,
      help: 'Finished jobs moved out of the hot table by this leader',
      labelNames: ['mode'],
      registers,
    });
    // Present from the start at 0, so that increase() sees the first prune.
    this.pruned.inc({ mode: 'removed' }, 0);

    // Depth and age come from the database at scrape time, so every worker's
    // endpoint shows the whole queue, not just its own share.
    const sources = this.depthSources;
    const seen = this.depthSeen;
    // The depth gauges are collected in the same scrape (prom-client starts every
    // metric's collect in one turn): they share one read, forgotten once it settles
    // so that the next scrape reads afresh. (Forgotten a turn later, a scrape made
    // within a millisecond of a slow one got the slow one's result again.)
    let pending: Promise<Map<string, DepthRow[]>> | undefined;
    const read = () =>
      (pending ??= readDepth(sources, seen).finally(() => {
        pending = undefined;
      }));
    type Labels = Record<string, string>;
    const depthGauge = (name: string, help: string, labelNames: string[], pick: (row: DepthRow) => [Labels, number][]) =>
      new client.Gauge({
        name,
        help,
        labelNames: ['schema', 'queue', ...labelNames],
        registers,
        async collect() {
          this.reset();
          for (const [schema, rows] of await read()) {
            for (const row of rows)
              for (const [labels, value] of pick(row)) this.set({ schema, queue: row.queue, ...labels }, value);
          }
        },
      });
    depthGauge(`${p}queue_depth`, 'Jobs per queue and state (due, scheduled, processing)', ['state'], (r) => [
      [{ state: 'due' }, r.due],
      [{ state: 'scheduled' }, r.scheduled],
      [{ state: 'processing' }, r.processing],
    ]);
    depthGauge(`${p}queue_oldest_due_age_seconds`, 'How long the oldest due pending job of a queue has waited', [], (r) => [
      [{}, r.oldest_due_seconds],
    ]);
    // Without it, a database that cannot answer made the depth series vanish, and
    // alerts on depth resolved (outside review 83).
    new client.Gauge({
      name: `${p}queue_depth_up`,
      help: `1 when this scrape read queue depth from the schema's database, 0 when it could not within ${DEPTH_READ_LIMIT_MS / 1_000} s (the depth and age series are then absent)`,
      labelNames: ['schema'],
      registers,
      async collect() {
        this.reset();
        const got = await read();
        for (const schema of sources.keys()) this.set({ schema }, got.has(schema) ? 1 : 0);
      },
    });
  }

  /**
   * Reports depth and age of this schema's queues at scrape time, read through `db`.
   * `queues`: reported from the start, at 0 while they have no pending or running job
   * (a worker passes its own; after a restart a drained queue's series came back only
   * with its next job, outside review 164).
   */
  watchSchema(schema: string, db: Queryable, queues: readonly string[] = []): void {
    this.depthSources.set(schema, db);
    remember(this.depthSeen, schema, queues);
  }

  unwatchSchema(schema: string): void {
    this.depthSources.delete(schema);
    this.depthSeen.delete(schema);
  }

  /** The exposition text, as /metrics serves it. */
  text(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}

/** Longest wait for the depth read at a scrape: well inside Prometheus's default 10 s scrape timeout. */
const DEPTH_READ_LIMIT_MS = 5_000;

/**
 * Reads depth and age of each watched schema. `seen` keeps, per schema, every queue
 * read so far: one absent from a later read has no pending or running job, and is
 * reported at 0 rather than left out (a series that vanished when its queue drained
 * left alerts on it at "no data"). At most SEEN_LIMIT per schema: queue names made
 * per request would otherwise grow it, and the series, without end.
 */
async function readDepth(sources: Map<string, Queryable>, seen: Map<string, Set<string>>): Promise<Map<string, DepthRow[]>> {
  const out = new Map<string, DepthRow[]>();
  await Promise.all(
    [...sources].map(async ([schema, db]) => {
      try {
        // Bounded: behind a lock the read waited for the statement timeout (30 s), past
        // Prometheus's scrape timeout, and the whole scrape was lost (outside review 83).
        const { rows } = await timeLimit(db.query(metricsStatements(schema).depth), DEPTH_READ_LIMIT_MS, () => {}, 'queue depth');
        out.set(schema, withSeen(rows as DepthRow[], seen, schema));
      } catch {
        // A scrape must not fail because the database is briefly away; the gauge is just absent.
      }
    }),
  );
  return out;
}

const SEEN_LIMIT = 1_000;

/** Adds `queues` to what `seen` keeps of `schema` (at most SEEN_LIMIT); returns all it keeps. */
function remember(seen: Map<string, Set<string>>, schema: string, queues: Iterable<string>): Set<string> {
  let known = seen.get(schema);
  if (!known) seen.set(schema, (known = new Set()));
  for (const queue of queues) if (known.size < SEEN_LIMIT) known.add(queue);
  return known;
}

function withSeen(rows: DepthRow[], seen: Map<string, Set<string>>, schema: string): DepthRow[] {
  const known = remember(
    seen,
    schema,
    rows.map((r) => r.queue),
  );
  const present = new Set(rows.map((r) => r.queue));
  const drained = [...known].filter((queue) => !present.has(queue));
  return [...rows, ...drained.map((queue) => ({ queue, due: 0, scheduled: 0, processing: 0, oldest_due_seconds: 0 }))];
}
