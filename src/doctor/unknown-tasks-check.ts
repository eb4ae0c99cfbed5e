import { findUnknownTasks, findUnwatchedQueues, type UnknownTask } from '../admin/workers.js';
import { rows, type Queryable } from '../db/executor.js';
import { quoteSchema } from '../db/identifiers.js';
import { doctorStatements } from '../db/statements/doctor.js';
import type { CheckResult, DoctorThresholds } from './findings.js';
import { firstFew, formatMs } from './format.js';

const ID = 'unknown_tasks';
const TITLE = 'tasks no worker handles';

/**
 * Due jobs that wait forever because no live worker of their queue has a
 * handler for their task (a typo in a task name, a handler not deployed yet, a
 * worker given the wrong task module). Read from the workers registry: workers
 * that predate it (or cannot write it) are invisible, and a queue with no live
 * worker at all is the backlog check's business.
 */
export async function checkUnknownTasks(db: Queryable, schema: string, t: DoctorThresholds): Promise<CheckResult> {
  const [found] = await rows<{ installed: boolean }>(db, doctorStatements(schema).installed, [`${quoteSchema(schema)}.workers`]);
  if (found?.installed !== true) {
    return {
      id: ID,
      title: TITLE,
      status: 'warn',
      summary: 'no workers registry in this schema (migration 0017), so this cannot be checked',
      advice: 'Run `sluice migrate` with this version of Sluice.',
      details: [],
    };
  }
  return unknownTasksResult(await findUnknownTasks(db, schema), t, await findUnwatchedQueues(db, schema));
}

/**
 * The finding for a list of unknown tasks: warn, critical once the oldest waited
 * past the backlog's critical age. `unwatched`: queues with due jobs and no live
 * worker, which this check cannot judge; the ok summary says so rather than
 * "every due job has a live worker" (outside review 79: said with no worker alive).
 */
export function unknownTasksResult(unknown: UnknownTask[], t: DoctorThresholds, unwatched: string[] = []): CheckResult {
  if (unknown.length === 0) {
    const summary =
      unwatched.length === 0
        ? 'every due job has a live worker with its task'
        : `${notChecked(unwatched)}; every other due job has a live worker with its task`;
    return { id: ID, title: TITLE, status: 'ok', summary, details: [] };
  }
  const oldest = Math.max(...unknown.map((u) => u.oldestMs));
  const found = unknown.map((u) => `${u.task} on ${u.queue}: ${u.jobs} due, oldest waiting ${formatMs(u.oldestMs)}`);
  return {
    id: ID,
    title: TITLE,
    status: oldest >= t.backlogAgeMs[1] ? 'critical' : 'warn',
    summary: [...found, ...(unwatched.length === 0 ? [] : [notChecked(unwatched)])].join('; '),
    advice:
      'No live worker of the queue has a handler for the task, so these jobs never run. Deploy a worker with ' +
      'that task (check the spelling of the task name), or cancel the jobs.',
    details: unknown,
  };
}

/** What this check cannot judge: queues with due jobs and no live worker at all. */
function notChecked(unwatched: string[]): string {
  const queues = unwatched.length === 1 ? 'queue' : `${unwatched.length} queues`;
  return `not checked for ${queues} with due jobs and no live worker (${firstFew(unwatched, 'queues')}: see the backlog check)`;
}
