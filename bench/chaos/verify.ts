/**
 * What the chaos run proves, read from the database afterwards: every job
 * completed, no two runs of a job overlapped, every re-run followed a fault that
 * explains it, and the limited queue never ran more jobs at once than its limit.
 */
import type pg from 'pg';
import { LIMITED_QUEUE, LIMITED_QUEUE_CONCURRENCY } from './chaos-jobs.js';
import { FAULT_KINDS, FAULT_NAMES, type FaultKind } from './faults.js';

export interface ChaosReport {
  jobs: number;
  completed: number;
  /** Jobs not `completed` at the end. */
  lost: number;
  /** Faults actually injected, by kind. */
  faults: Record<FaultKind, number>;
  /** Handler runs recorded, and how many of them were re-runs of a job that had already run. */
  runs: number;
  reruns: number;
  /** Runs aborted before their work began (their start could not be written in time). */
  unworked: number;
  /** Re-runs by what happened to the run before them. */
  rerunCauses: Record<string, number>;
  /** Overlapping runs of one job (a run that had not ended when the next one started). */
  overlaps: number;
  /** Attempts spent minus runs recorded (see formatReport). */
  unstartedClaims: number;
  /** Most runs of the limited queue at once (its limit is LIMITED_QUEUE_CONCURRENCY). */
  limitedPeak: number;
  /** What the workers reported: jobs rescued by the leaders, silent LISTEN connections and statements found out. */
  events: { rescued: number; listenSilent: number; noAnswer: number; lockLost: number };
  violations: string[];
  seconds: number;
}

export interface RunFacts {
  expectedJobs: number;
  visibilityTimeoutMs: number;
  injected: Record<FaultKind, number>;
  planned: Record<FaultKind, number>;
  /** Everything every worker process printed, killed ones included. */
  outputs: string[];
  violations: string[];
  seconds: number;
}

/**
 * The runs that did work, each with the end that matters for overlap (when its
 * work stopped, or when its worker was killed) and the work start of the job's
 * next run. For intervals sorted by start, any two that overlap imply two
 * neighbours that do, so comparing each with the next finds every overlap.
 */
const workSpans = (s: string) => `
  SELECT r.run_id, r.job_id, r.worker, r.started_at, r.aborted, j.queue, k.at AS killed_at,
         coalesce(r.ended_at, k.at) AS until,
         lead(r.started_at) OVER w AS next_start, lead(r.worker) OVER w AS next_worker
  FROM ${s}.runs r JOIN ${s}.jobs j ON j.id = r.job_id LEFT JOIN ${s}.kills k ON k.worker = r.worker
  WHERE r.worked
  WINDOW w AS (PARTITION BY r.job_id ORDER BY r.started_at, r.run_id)`;

/**
 * Every run in the order its worker invoked the handler (a run's start row can be
 * written late, while Postgres restarts), with the job's next run.
 */
const runSequence = (s: string) => `
  SELECT r.run_id, r.job_id, r.worker, r.invoked_at, r.started_at, r.ended_at, r.aborted, r.worked, k.at AS killed_at,
         lead(r.invoked_at) OVER w AS next_invoked, lead(r.worker) OVER w AS next_worker,
         row_number() OVER w AS n, count(*) OVER (PARTITION BY r.job_id) AS of
  FROM ${s}.runs r LEFT JOIN ${s}.kills k ON k.worker = r.worker
  WINDOW w AS (PARTITION BY r.job_id ORDER BY r.invoked_at, r.run_id)`;

/** The kind of the first fault (in `kinds` order) that hit run r's worker or job in [from, to]. */
const faultIn = (s: string, kinds: string[], from: string, to: string) => `(
  SELECT f.kind FROM ${s}.faults f
  WHERE f.kind IN (${kinds.map((k) => `'${k}'`).join(', ')})
    AND f.started_at <= ${to} AND coalesce(f.ended_at, 'infinity') >= ${from}
    AND (f.worker IS NULL OR f.worker = r.worker) AND (f.job_ids IS NULL OR r.job_id = ANY(f.job_ids))
  ORDER BY array_position(ARRAY[${kinds.map((k) => `'${k}'`).join(', ')}], f.kind) LIMIT 1)`;

/** Faults that keep a worker from renewing its locks: its network, its job's row, the server, its connections. */
const LOCK_FAULTS = ['cutOff', 'rowLock', 'restart', 'terminate'];

/**
 * Why a job ran again after run r ($1: the visibility timeout). A SIGKILL
 * explains it; so does an abort by the runtime (the handler recorded its
 * signal's reason), named after the fault that kept the worker from renewing the
 * lock during the run or shortly before it. A run that finished its work runs
 * again only when its result could not be written before its lock expired: its
 * worker cut off, its row locked, or the worker unable to reconnect after a
 * restart or after its connections were killed. "Shortly" is two visibility
 * timeouts: on a loaded machine, reconnecting after a restart can take seconds
 * (connecting alone can take over a second), and a lock goes unrenewed for up to
 * a visibility timeout before that shows. Anything else is 'unexplained'.
 */
const rerunCause = (s: string) => {
  const slack = `2 * $1::float8 * interval '1 millisecond'`;
  return `
  CASE
    WHEN r.killed_at IS NOT NULL AND r.killed_at <= r.next_invoked AND r.ended_at IS NULL THEN 'SIGKILL mid-run'
    WHEN r.killed_at IS NOT NULL AND r.killed_at <= r.next_invoked THEN 'SIGKILL before its result was written'
    WHEN r.aborted IS NOT NULL THEN 'aborted (' || r.aborted || CASE WHEN r.worked THEN '' ELSE ', before its work began' END
      || ') by ' || coalesce(${faultIn(s, LOCK_FAULTS, `r.invoked_at - ${slack}`, 'r.ended_at')}, 'no fault')
    ELSE coalesce('result dropped after ' || ${faultIn(s, LOCK_FAULTS, `r.ended_at - ${slack}`, 'r.next_invoked')}, 'unexplained')
  END`;
};

export async function verify(pool: pg.Pool, s: string, facts: RunFacts): Promise<ChaosReport> {
  const q = async <T extends pg.QueryResultRow>(text: string, values: unknown[] = []) => (await pool.query<T>(text, values)).rows;
  const v = [...facts.violations];
  const spans = workSpans(s);
  const sequence = runSequence(s);

  const [totals] = await q<{ jobs: number; completed: number; attempts: number }>(
    `SELECT count(*)::int AS jobs, count(*) FILTER (WHERE status = 'completed')::int AS completed,
            coalesce(sum(attempts), 0)::int AS attempts FROM ${s}.jobs`,
  );
  const statuses = await q<{ status: string; n: number }>(`SELECT status, count(*)::int AS n FROM ${s}.jobs GROUP BY status`);
  const [work] = await q<{ overlaps: number; unended: number }>(
    `SELECT count(*) FILTER (WHERE until > next_start)::int AS overlaps, count(*) FILTER (WHERE until IS NULL)::int AS unended
     FROM (${spans}) r`,
  );
  const [stats] = await q<{ runs: number; reruns: number; unworked: number; last_unfinished: number }>(
    `SELECT count(*)::int AS runs, (count(*) - count(DISTINCT job_id))::int AS reruns,
            count(*) FILTER (WHERE NOT worked)::int AS unworked,
            count(*) FILTER (WHERE n = of AND (ended_at IS NULL OR aborted IS NOT NULL))::int AS last_unfinished
     FROM (${sequence}) r`,
  );
  const causes = await q<{ cause: string; n: number }>(
    `SELECT ${rerunCause(s)} AS cause, count(*)::int AS n FROM (${sequence}) r
     WHERE next_invoked IS NOT NULL GROUP BY 1 ORDER BY 2 DESC, 1`,
    [facts.visibilityTimeoutMs],
  );
  const [never] = await q<{ n: number }>(
    `SELECT count(*)::int AS n FROM ${s}.jobs j WHERE NOT EXISTS (SELECT 1 FROM ${s}.runs r WHERE r.job_id = j.id AND r.worked)`,
  );
  // A sweep over the limited queue's work spans: starts (+1) and ends (-1), ends first at a tie.
  const [peak] = await q<{ n: number | null }>(
    `SELECT max(c)::int AS n FROM (
       SELECT sum(d) OVER (ORDER BY t, d) AS c FROM (
         SELECT started_at AS t, 1 AS d FROM (${spans}) r WHERE queue = $1
         UNION ALL SELECT until, -1 FROM (${spans}) r WHERE queue = $1 AND until IS NOT NULL) e) x`,
    [LIMITED_QUEUE],
  );

  const lost = totals!.jobs - totals!.completed;
  if (totals!.jobs !== facts.expectedJobs) v.push(`${facts.expectedJobs} jobs enqueued but ${totals!.jobs} in the table`);
  if (lost > 0) v.push(`${lost} jobs not completed: ${JSON.stringify(statuses)}`);
  if (never!.n > 0) v.push(`${never!.n} jobs never ran`);
  if (work!.overlaps > 0) {
    const examples = await q(
      `SELECT job_id, worker, started_at, until, aborted, killed_at, next_worker, next_start FROM (${spans}) r
       WHERE until > next_start ORDER BY started_at LIMIT 5`,
    );
    v.push(`${work!.overlaps} runs overlapped the next run of the same job, e.g. ${JSON.stringify(examples)}`);
  }
  if (work!.unended > 0) v.push(`${work!.unended} runs never ended although their worker was not killed`);
  if (stats!.last_unfinished > 0) v.push(`${stats!.last_unfinished} jobs whose last run did not finish its work`);
  const rerunCauses = Object.fromEntries(causes.map((c) => [c.cause, c.n]));
  for (const { cause, n } of causes) {
    if (cause === 'unexplained' || cause.endsWith('by no fault')) {
      const examples = await q(
        `SELECT job_id, worker, invoked_at, started_at, ended_at, aborted, next_worker, next_invoked,
                (SELECT errors FROM ${s}.jobs WHERE id = job_id) AS errors
         FROM (${sequence}) r WHERE next_invoked IS NOT NULL AND ${rerunCause(s)} = $2 ORDER BY invoked_at LIMIT 5`,
        [facts.visibilityTimeoutMs, cause],
      );
      v.push(
        `${n} re-runs ${cause === 'unexplained' ? 'that no fault explains' : `after a run ${cause}`}, e.g. ${JSON.stringify(examples)}`,
      );
    } else if (cause.startsWith('aborted (lock-lost')) {
      v.push(`${n} runs were still running when their job was taken back (${cause}): the lock-renewal abort came too late`);
    }
  }
  if ((peak!.n ?? 0) > LIMITED_QUEUE_CONCURRENCY) {
    v.push(`the '${LIMITED_QUEUE}' queue ran ${peak!.n} jobs at once, over its limit of ${LIMITED_QUEUE_CONCURRENCY}`);
  }
  for (const kind of FAULT_KINDS) {
    if (facts.injected[kind] < facts.planned[kind]) {
      v.push(`only ${facts.injected[kind]} of ${facts.planned[kind]} '${kind}' faults were injected`);
    }
  }

  const all = facts.outputs.join('\n');
  const count = (re: RegExp) => all.match(re)?.length ?? 0;
  return {
    jobs: totals!.jobs,
    completed: totals!.completed,
    lost,
    faults: { ...facts.injected },
    runs: stats!.runs,
    reruns: stats!.reruns,
    unworked: stats!.unworked,
    rerunCauses,
    overlaps: work!.overlaps,
    unstartedClaims: totals!.attempts - stats!.runs,
    limitedPeak: peak!.n ?? 0,
    events: {
      rescued: [...all.matchAll(/^event rescued (\d+)$/gm)].reduce((sum, m) => sum + Number(m[1]), 0),
      listenSilent: count(/^event listen-silent$/gm),
      noAnswer: count(/^event no-answer$/gm),
      lockLost: count(/^event lock-lost$/gm),
    },
    violations: v,
    seconds: facts.seconds,
  };
}

/** One line per number, for the CLI and for test failure messages. */
export function formatReport(r: ChaosReport): string {
  const faults = FAULT_KINDS.reduce((sum, k) => sum + r.faults[k], 0);
  const kinds = FAULT_KINDS.filter((k) => r.faults[k] > 0).length;
  return [
    `jobs:               ${r.jobs}`,
    `completed:          ${r.completed}`,
    `lost:               ${r.lost}`,
    `faults injected:    ${faults} of ${kinds} kinds`,
    ...FAULT_KINDS.map((k) => `  ${String(r.faults[k]).padStart(4)}  ${FAULT_NAMES[k]}`),
    `handler runs:       ${r.runs} (${r.unworked} aborted before their work began)`,
    `overlapping runs:   ${r.overlaps}`,
    `re-runs:            ${r.reruns}, by what happened to the run before:`,
    ...Object.entries(r.rerunCauses).map(([cause, n]) => `  ${String(n).padStart(4)}  ${cause}`),
    `attempts - runs:    ${r.unstartedClaims} (above 0: claims whose reply was lost with its connection, and never-started ` +
      'jobs failed on a lost lock; below 0: jobs claimed ahead that started, and whose worker lost them before their start ' +
      'was written: the rescuer gave their attempt back)',
    `limited queue peak: ${r.limitedPeak} at once (limit ${LIMITED_QUEUE_CONCURRENCY})`,
    `worker reports:     ${r.events.rescued} jobs rescued, ${r.events.listenSilent} silent LISTEN connections replaced, ` +
      `${r.events.noAnswer} statements timed out, ${r.events.lockLost} lock-lost events`,
    `violations:         ${r.violations.length}`,
    ...r.violations.map((x) => `  - ${x}`),
    `drain time:         ${r.seconds.toFixed(1)} s`,
  ].join('\n');
}
