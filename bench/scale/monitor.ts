import pg from 'pg';

/** Peaks of one phase, from samples taken every `intervalMs`. */
export interface ConnectionPeaks {
  /** Postgres backends serving the workers' pools (PgBouncer's server connections). */
  serverPool: number;
  /** Of those, running a statement at the moment of a sample. */
  serverPoolBusy: number;
  /** Postgres backends holding the workers' direct LISTEN connections. */
  listen: number;
  /** Both of the above at once: every Postgres connection the workers cost. */
  workers: number;
  /** Every client backend of the server, the benchmark's own included: what max_connections bounds. */
  allBackends: number;
  /** Client connections at PgBouncer (linked to a server connection or idle). */
  bouncerClients: number;
  /** Clients waiting at PgBouncer for a server connection. */
  bouncerWaiting: number;
  /** Longest wait of a client for a server connection, ms (PgBouncer's maxwait). */
  bouncerMaxWaitMs: number;
  samples: number;
}

const ZERO: ConnectionPeaks = {
  serverPool: 0,
  serverPoolBusy: 0,
  listen: 0,
  workers: 0,
  allBackends: 0,
  bouncerClients: 0,
  bouncerWaiting: 0,
  bouncerMaxWaitMs: 0,
  samples: 0,
};

/**
 * Counts connections while workers run: Postgres backends by application_name
 * (the workers tag their pool URL with `poolTag`, their LISTEN URL with
 * `listenTag`; PgBouncer sets a client's application_name on the server
 * connection it lends it) from pg_stat_activity, and PgBouncer's clients from
 * SHOW POOLS on its admin console. Keeps the peaks since the last `reset()`.
 */
export class ConnectionMonitor {
  private peaks: ConnectionPeaks = { ...ZERO };
  private timer: NodeJS.Timeout | undefined;
  private sampling: Promise<void> | undefined;

  private constructor(
    private readonly direct: pg.Client,
    private readonly admin: pg.Client,
    private readonly database: string,
    private readonly poolTag: string,
    private readonly listenTag: string,
  ) {}

  static async start(
    directUrl: string,
    adminUrl: string,
    tags: { pool: string; listen: string },
    intervalMs = 100,
  ): Promise<ConnectionMonitor> {
    const direct = new pg.Client({ connectionString: directUrl, application_name: 'sluice-scale-monitor' });
    const admin = new pg.Client({ connectionString: adminUrl });
    for (const c of [direct, admin]) c.on('error', () => {});
    await direct.connect();
    await admin.connect();
    const database = decodeURIComponent(new URL(directUrl).pathname.slice(1)) || 'postgres';
    const monitor = new ConnectionMonitor(direct, admin, database, tags.pool, tags.listen);
    await monitor.sample();
    monitor.timer = setInterval(() => {
      monitor.sampling ??= monitor.sample().finally(() => (monitor.sampling = undefined));
    }, intervalMs);
    return monitor;
  }

  /** The peaks since the last reset, and starts over. */
  reset(): ConnectionPeaks {
    const peaks = this.peaks;
    this.peaks = { ...ZERO };
    return peaks;
  }

  /** The latest sample of pg_stat_activity and SHOW POOLS, without touching the peaks. */
  async now(): Promise<{ listen: number; bouncerClients: number }> {
    const [backends, pool] = await Promise.all([this.backends(), this.pool()]);
    return { listen: backends.listen, bouncerClients: pool.clients };
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.sampling;
    await Promise.all([this.direct.end(), this.admin.end()]);
  }

  private async sample(): Promise<void> {
    const [b, p] = await Promise.all([this.backends(), this.pool()]);
    const peaks = this.peaks;
    peaks.serverPool = Math.max(peaks.serverPool, b.pool);
    peaks.serverPoolBusy = Math.max(peaks.serverPoolBusy, b.poolBusy);
    peaks.listen = Math.max(peaks.listen, b.listen);
    peaks.workers = Math.max(peaks.workers, b.pool + b.listen);
    peaks.allBackends = Math.max(peaks.allBackends, b.all);
    peaks.bouncerClients = Math.max(peaks.bouncerClients, p.clients);
    peaks.bouncerWaiting = Math.max(peaks.bouncerWaiting, p.waiting);
    peaks.bouncerMaxWaitMs = Math.max(peaks.bouncerMaxWaitMs, p.maxWaitMs);
    peaks.samples++;
  }

  private async backends(): Promise<{ pool: number; poolBusy: number; listen: number; all: number }> {
    const { rows } = await this.direct.query(
      `SELECT count(*) FILTER (WHERE application_name = $1)::int AS pool,
              count(*) FILTER (WHERE application_name = $1 AND state <> 'idle')::int AS "poolBusy",
              count(*) FILTER (WHERE application_name = $2)::int AS listen,
              count(*)::int AS all
       FROM pg_stat_activity WHERE backend_type = 'client backend'`,
      [this.poolTag, this.listenTag],
    );
    return rows[0];
  }

  private async pool(): Promise<{ clients: number; waiting: number; maxWaitMs: number }> {
    // The admin console speaks the simple query protocol only.
    const { rows } = await this.admin.query('SHOW POOLS');
    const row = rows.find((r) => r.database === this.database);
    if (!row) return { clients: 0, waiting: 0, maxWaitMs: 0 };
    return {
      clients: Number(row.cl_active),
      waiting: Number(row.cl_waiting),
      maxWaitMs: Number(row.maxwait) * 1000 + Number(row.maxwait_us) / 1000,
    };
  }
}
