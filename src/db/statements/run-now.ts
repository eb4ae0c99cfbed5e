import { quoteSchema } from '../identifiers.js';
import { jobColumns } from './job-columns.js';
import { perSchema } from './per-schema.js';

/** "Run now" for a waiting job and for a recurring schedule (the dashboard's buttons), for one schema. */
export interface RunNowStatements {
  /** $1 job id, $2 actor. */
  readonly job: string;
  /** $1 schedule name, $2 actor. */
  readonly schedule: string;
}

export const runNowStatements = perSchema((schema: string): RunNowStatements => {
  const s = quoteSchema(schema);
  return {
    // A pending job becomes due now; one already due keeps its run_at, so its
    // place in the FIFO order is not lost. Logged in the audit log by the same
    // statement, like every admin action (migration 0007).
    job: `WITH changed AS (
        UPDATE ${s}.jobs j SET run_at = least(j.run_at, now()), updated_at = now()
        WHERE j.id = $1::bigint AND j.status = 'pending'
        RETURNING j.*
      ), logged AS (
        INSERT INTO ${s}.audit_log (job_id, queue, action, actor)
        SELECT id, queue, 'run_now', $2::text FROM changed
      )
      SELECT ${jobColumns('changed')} FROM changed`,

    // One extra job of the schedule, due now, outside its ticks: last_tick is not
    // moved, so the next tick comes when it would have. No job key, so it never
    // collides with a tick's job. enqueue_job() NOTIFYs the queue's workers.
    // The CTE is referenced twice and therefore evaluated once.
    schedule: `WITH made AS (
        SELECT ${s}.enqueue_job(c.queue, c.payload, now(), c.max_attempts, c.task, c.priority,
          _group_key => c.group_key) AS id, c.queue
        FROM ${s}.cron_schedules c WHERE c.name = $1
      ), logged AS (
        INSERT INTO ${s}.audit_log (job_id, queue, action, actor)
        SELECT id, queue, 'run_schedule', $2::text FROM made
      )
      SELECT id::text AS id, queue FROM made`,
  };
});
