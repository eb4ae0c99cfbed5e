import type * as PromClient from 'prom-client';
import type { Queryable } from '../db/executor.js';
import { metricsStatements } from '../db/statements/metrics.js';
import { requirePeer } from '../optional-peer.js';
import { timeLimit } from '../lifecycle/time-limit.js';
import { ConfigError } from '../errors.js';
import { checks } from '../validate.js';
import { metricPrefix } from './metric-prefix.js';
import { metricsRegistry, registerAll } from './registry.js';

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
  inc(labels: Labels<T>, value?: number): void;
  dec(labels: Labels<T>, value?: number): void;
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
  readonly enqueued: MetricsCounter<'schema' | 'queue' | 'task'>;
  readonly completed: MetricsCounter<'schema' | 'queue' | 'task'>;
  readonly failed: MetricsCounter<'schema' | 'queue' | 'task' | 'final'>;
  readonly duration: MetricsHistogram<'schema' | 'queue' | 'task' | 'outcome'>;
  readonly wait: MetricsHistogram<'schema' | 'queue' | 'task'>;
  readonly claimBatch: MetricsHistogram<'schema'>;
  readonly running: MetricsGauge<'schema'>;
  readonly leader: MetricsGauge<'schema'>;
  readonly rescued: MetricsCounter<'schema' | 'queue'>;
  readonly pruned: MetricsCounter<'schema' | 'mode'>;
  private readonly depthSources = new Map<string, Queryable>();
  /** Each schema's watchSchema calls not ended by an unwatchSchema, by their `db`. */
  private readonly depthWatchers = new Map<string, Queryable[]>();
  /** Queues each schema's reads have shown so far (see readDepth). */
  private readonly depthSeen = new Map<string, Set<string>>();

  constructor(options: SluiceMetricsOptions = {}) {
    rejectUnknownKeys(options, new Set(['registry', 'prefix', 'durationBuckets']), 'SluiceMetrics');
    const client = requirePeer<typeof PromClient>('prom-client', 'SluiceMetrics');
    const p = metricPrefix(options.prefix, 'SluiceMetrics');
    const registry = metricsRegistry(client, options.registry, 'SluiceMetrics');
    this.registry = registry;
    const made = registerAll(registry, 'SluiceMetrics', () => {
      const jobs = jobMetrics(client, [registry], p, options.durationBuckets);
      depthGauges(client, [registry], p, this.depthSources, this.depthSeen);
      return jobs;
    });
    this.enqueued = made.enqueued;
    this.completed = made.completed;
    this.failed = made.failed;
    this.duration = made.duration;
    this.wait = made.wait;
    this.claimBatch = made.claimBatch;
    this.running = made.running;
    this.leader = made.leader;
    this.rescued = made.rescued;
    this.pruned = made.pruned;
  }

  /**
   * Reports depth and age of this schema's queues at scrape time, read through `db`.
   * `queues`: reported from the start, at 0 while they have no pending or running job
   * (a worker passes its own; after a restart a drained queue's series came back only
   * with its next job, outside review 164).
   */
  watchSchema(schema: string, db: Queryable, queues: readonly string[] = []): void {
    this.depthSources.set(schema, db);
    this.depthWatchers.set(schema, [...(this.depthWatchers.get(schema) ?? []), db]);
    remember(this.depthSeen, schema, queues);
  }

  /**
   * Ends the watchSchema of this schema through `db` (the latest one when not
   * given). Its series go once every watch has ended, and until then they are read
   * through a `db` still watching: two workers of one schema share a collector, and
   * the first to stop left the other's endpoint reading through its closed pool.
   */
  unwatchSchema(schema: string, db?: Queryable): void {
    const watching = [...(this.depthWatchers.get(schema) ?? [])];
    const at = db === undefined ? watching.length - 1 : watching.lastIndexOf(db);
    if (at >= 0) watching.splice(at, 1);
    const latest = watching.at(-1);
    if (latest !== undefined) {
      this.depthWatchers.set(schema, watching);
      this.depthSources.set(schema, latest);
      return;
    }
    this.depthWatchers.delete(schema);
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

const DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300];

/**
 * The counters, histograms and gauges fed by Queues and Workers. Every one carries
 * the schema: Queues and Workers of several schemas may share one collector, and
 * their counts were added together (outside review 245).
 */
function jobMetrics(client: typeof PromClient, registers: PromClient.Registry[], p: string, durationBuckets?: number[]) {
  return {
    enqueued: new client.Counter({
      name: `${p}jobs_enqueued_total`,
      help: 'Jobs inserted by this process (counted when the INSERT succeeds, even if your transaction later rolls back)',
      labelNames: ['schema', 'queue', 'task'],
      registers,
    }),
    completed: new client.Counter({
      name: `${p}jobs_completed_total`,
      help: 'Jobs completed by this process',
      labelNames: ['schema', 'queue', 'task'],
      registers,
    }),
    failed: new client.Counter({
      name: `${p}jobs_failed_total`,
      help: 'Failed attempts; final="true" when no retry is left',
      labelNames: ['schema', 'queue', 'task', 'final'],
      registers,
    }),
    duration: new client.Histogram({
      name: `${p}job_duration_seconds`,
      help: 'Handler run time',
      labelNames: ['schema', 'queue', 'task', 'outcome'],
      registers,
      buckets: durationBuckets ?? DURATION_BUCKETS,
    }),
    wait: new client.Histogram({
      name: `${p}job_wait_seconds`,
      help: 'From run_at (when the job became due) to its start',
      labelNames: ['schema', 'queue', 'task'],
      registers,
      buckets: [...DURATION_BUCKETS, 1800],
    }),
    claimBatch: new client.Histogram({
      name: `${p}claim_batch_size`,
      help: 'Jobs taken by one claim statement (non-empty claims)',
      labelNames: ['schema'],
      registers,
      buckets: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000],
    }),
    // Gauges that each worker moves by its own changes (inc/dec), so that workers
    // sharing a collector add up instead of overwriting each other.
    running: new client.Gauge({
      name: `${p}jobs_running`,
      help: "Jobs running in this process's workers now",
      labelNames: ['schema'],
      registers,
    }),
    leader: new client.Gauge({
      name: `${p}maintenance_leader`,
      help: "1 while one of this process's workers is the maintenance leader",
      labelNames: ['schema'],
      registers,
    }),
    rescued: new client.Counter({
      name: `${p}jobs_rescued_total`,
      help: 'Jobs taken back from dead workers by this leader',
      labelNames: ['schema', 'queue'],
      registers,
    }),
    pruned: new client.Counter({
      name: `${p}jobs_pruned_total`,
      help: 'Finished jobs moved out of the hot table by this leader',
      labelNames: ['schema', 'mode'],
      registers,
    }),
  };
}

/**
 * Depth and age come from the database at scrape time, so every worker's endpoint
 * shows the whole queue, not just its own share. The gauges are collected in the
 * same scrape (prom-client starts every metric's collect in one turn): they share
 * one read, forgotten once it settles so that the next scrape reads afresh.
 * (Forgotten a turn later, a scrape made within a millisecond of a slow one got the
 * slow one's result again.)
 */
function depthGauges(
  client: typeof PromClient,
  registers: PromClient.Registry[],
  p: string,
  sources: Map<string, Queryable>,
  seen: Map<string, Set<string>>,
): void {
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
