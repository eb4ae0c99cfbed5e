import type { JobRow } from '../job.js';

/** Over this many characters of JSON, a list row leaves a value out (the job's own page shows it whole). */
export const LISTED_VALUE_CHARS = 4_096;

const LARGE_FIELDS = ['payload', 'result', 'errors', 'progress'] as const;

/** A job as `GET api/jobs` lists it: large values left out, their sizes in `omitted`. */
export type ListedJob = Omit<JobRow, (typeof LARGE_FIELDS)[number]> &
  Partial<Pick<JobRow, (typeof LARGE_FIELDS)[number]>> & { omitted?: Record<string, number> };

/**
 * A page of jobs for the list: a payload, result, error history or progress over
 * LISTED_VALUE_CHARS of JSON is left out and its size given instead. The list
 * shows none of them, and 50 jobs of 1 MiB payloads made a 51 MB page; 1,000 of
 * them a response over the longest string V8 makes, a 500 (outside review 162).
 */
export function listedPage<P extends { jobs: JobRow[] }>(page: P): Omit<P, 'jobs'> & { jobs: ListedJob[] } {
  return { ...page, jobs: page.jobs.map(listed) };
}

function listed(job: JobRow): ListedJob {
  let row: ListedJob = job;
  for (const field of LARGE_FIELDS) {
    const chars = JSON.stringify(job[field] ?? null).length;
    if (chars <= LISTED_VALUE_CHARS) continue;
    const { [field]: _left, ...rest } = row;
    row = { ...rest, omitted: { ...row.omitted, [field]: chars } };
  }
  return row;
}
