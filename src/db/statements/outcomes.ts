/**
 * Pieces of the worker cycle (statements/worker.ts) that write the outcome of a
 * run: the completion, kept or deleted, and the start time of a run claimed
 * ahead. Parameters are the cycle's: see WorkerStore.cycle in db/store.ts.
 */

/** What the cycle does with a completed job's row (WorkerOptions.completedJobs). */
export type CompletedJobs = 'keep' | 'delete';

/**
 * A run's start for its row: the one written already, else the worker's ($16 for
 * completions, $17 for failures: ms since epoch, NULL where the claim started the
 * job). A job claimed ahead that started and ended between two cycles had its
 * start mark dropped for its outcome, and kept started_at NULL (4,860 of 5,000
 * completed jobs of a drain at concurrency 10).
 */
export function startedAt(alias: 'd' | 'f'): string {
  return `coalesce(j.started_at, to_timestamp(${alias}.started_ms / 1000.0))`;
}

/**
 * The CTE `completed` of the cycle (id, notify_on_finish of each job it
 * completed). 'keep' marks the rows completed, with their results. 'delete'
 * deletes them instead: a DELETE only stamps the row as gone, where the UPDATE
 * writes a new version of it and an entry in two indexes (jobs_pkey and
 * jobs_finished_idx), and nothing is left for the pruner. A job that
 * Queue.waitFor() flagged is kept, as with 'keep', so the waiter reads its result.
 */
export function completion(completed: CompletedJobs): string {
  const jobs = ':SCHEMA.jobs';
  const mine = `writable w JOIN unnest($2::bigint[], $3::int[], $12::jsonb[], $16::float8[], $18::jsonb[])
            AS d(id, attempt, result, started_ms, progress)
          ON d.id = w.id AND d.attempt = w.attempts`;
  const kept = (only: '' | ' AND w.watched') => `UPDATE ${jobs} j
        SET status = 'completed', locked_at = NULL, finished_at = now(), updated_at = now(),
            result = d.result, -- $12: what each handler returned (JSON text or NULL)
            started_at = ${startedAt('d')},
            progress = coalesce(d.progress, j.progress) -- $18: the run's last report, if any
        FROM ${mine}
        WHERE j.id = w.id AND w.mine${only}
        RETURNING j.id, j.notify_on_finish`;
  if (completed === 'keep')
    return `completed AS (
        ${kept('')}
      )`;
  // Kept or deleted by w.watched, the flag as locked (see writable), not by
  // j.notify_on_finish: a waitFor() that set it after this statement's snapshot
  // made the UPDATE pass the row (old version: not watched) and the DELETE drop it
  // on its recheck (new version: watched), so the job was neither completed nor
  // deleted, lost its lock and ran again (outside review: 4-21 of 1,500 jobs).
  return `completed_kept AS (
        ${kept(' AND w.watched')}
      ), completed_deleted AS (
        DELETE FROM ${jobs} j
        USING ${mine}
        WHERE j.id = w.id AND w.mine AND NOT w.watched
        RETURNING j.id, false AS notify_on_finish
      ), completed AS (
        SELECT * FROM completed_kept UNION ALL SELECT * FROM completed_deleted
      )`;
}
