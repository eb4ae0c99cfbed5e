import { quoteSchema } from '../identifiers.js';
import { perSchema } from './per-schema.js';

/** What SluiceMetrics reads at scrape time. */
export interface MetricsStatements {
  readonly depth: string;
}

/** The metrics statements for one schema, built once per schema (not on every scrape). */
export const metricsStatements = perSchema((schema: string): MetricsStatements => ({
  /**
   * Queue depth and age per queue, read at scrape time. Only pending and processing
   * rows: the partial indexes keep this cheap however many finished jobs there are.
   * A queue with a row in the queues table (settings, a pause) is there at 0 when it
   * has no such job: a drained queue's series went absent instead, and an alert on
   * `depth > N` stayed "no data" rather than resolving (SluiceMetrics also keeps, at
   * 0, every queue it saw).
   */
  depth: `WITH d AS (
      SELECT queue,
        count(*) FILTER (WHERE status = 'pending' AND run_at <= now())::int AS due,
        count(*) FILTER (WHERE status = 'pending' AND run_at > now())::int AS scheduled,
        count(*) FILTER (WHERE status = 'processing')::int AS processing,
        coalesce(extract(epoch FROM now() - min(run_at) FILTER (WHERE status = 'pending' AND run_at <= now())), 0)::float8 AS oldest_due_seconds
      FROM ${quoteSchema(schema)}.jobs
      WHERE status IN ('pending', 'processing')
      GROUP BY queue)
    SELECT * FROM d
    UNION ALL
    SELECT q.name, 0, 0, 0, 0 FROM ${quoteSchema(schema)}.queues q WHERE NOT EXISTS (SELECT FROM d WHERE d.queue = q.name)`,
}));
