import type { JobRow } from '../job.js';

/** Over this many characters of JSON, a list row leaves the payload out (the job's own page shows it whole). */
export const LISTED_PAYLOAD_CHARS = 4_096;

/** A job as `GET api/jobs` lists it: a large payload left out, its size in `omitted`. */
export type ListedJob = Omit<JobRow, 'payload'> & { payload?: unknown; omitted?: { payload: number } };

/**
 * A page of jobs for the list: a payload over LISTED_PAYLOAD_CHARS of JSON is left
 * out and its size given instead (the rows carry no result, errors or progress).
 * The list shows no payload, and 50 jobs of 1 MiB payloads made a 51 MB page;
 * 1,000 of them a response over the longest string V8 makes, a 500 (outside review 162).
 */
export function listedPage<P extends { jobs: JobRow[] }>(page: P): Omit<P, 'jobs'> & { jobs: ListedJob[] } {
  return { ...page, jobs: page.jobs.map(listed) };
}

function listed(job: JobRow): ListedJob {
  const chars = JSON.stringify(job.payload ?? null).length;
  if (chars <= LISTED_PAYLOAD_CHARS) return job;
  const { payload: _left, ...rest } = job;
  return { ...rest, omitted: { payload: chars } };
}
