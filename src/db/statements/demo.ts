import { quoteSchema } from '../identifiers.js';
import { perSchema } from './per-schema.js';

/**
 * What `sluice demo` runs besides Sluice itself: a scratch schema, the demo
 * application's own tables (users, and runs: which worker ran which job), and
 * the counts that check every job ran exactly once.
 */
export interface DemoStatements {
  /** One demo at a time per database: it drops and rebuilds its schema (held by the session). */
  readonly lockDemo: string;
  readonly dropSchema: string;
  readonly createUsers: string;
  readonly createRuns: string;
  /** $1 users, named user<i>@example.com. */
  readonly insertUsers: string;
  readonly insertGhost: string;
  /** Jobs whose payload names user $1. */
  readonly jobsOfUser: string;
  readonly completedJobs: string;
  /** $1 job id, $2 worker. */
  readonly recordRun: string;
  readonly runsPerWorker: string;
  readonly runsCheck: string;
}

/** The demo's statements for its schema. */
export const demoStatements = perSchema((schema: string): DemoStatements => {
  const s = quoteSchema(schema);
  return {
    lockDemo: `SELECT pg_try_advisory_lock(hashtext('sluice demo'), hashtext(current_database())) AS ok`,
    dropSchema: `DROP SCHEMA IF EXISTS ${s} CASCADE`,
    createUsers: `CREATE TABLE ${s}.users (id serial PRIMARY KEY, email text NOT NULL)`,
    createRuns: `CREATE TABLE ${s}.runs (job_id bigint PRIMARY KEY, worker text NOT NULL)`,
    insertUsers: `INSERT INTO ${s}.users (email) SELECT 'user' || i || '@example.com' FROM generate_series(1, $1) i RETURNING id`,
    insertGhost: `INSERT INTO ${s}.users (email) VALUES ('ghost@example.com') RETURNING id`,
    jobsOfUser: `SELECT count(*)::int AS n FROM ${s}.jobs WHERE payload->'userId' = to_jsonb($1::int)`,
    completedJobs: `SELECT count(*)::int AS n FROM ${s}.jobs WHERE status = 'completed'`,
    recordRun: `INSERT INTO ${s}.runs (job_id, worker) VALUES ($1, $2)`,
    runsPerWorker: `SELECT worker, count(*)::int AS n FROM ${s}.runs GROUP BY worker ORDER BY worker`,
    runsCheck: `SELECT count(*)::int AS runs, count(DISTINCT job_id)::int AS distinct_jobs,
              (SELECT count(*)::int FROM ${s}.jobs WHERE status = 'completed') AS completed FROM ${s}.runs`,
  };
});
