import {
  ConnectionError,
  DatabaseError,
  DuplicateJobError,
  NotSentError,
  SluiceError,
  ValidationError,
  isInsufficientPrivilege,
  wrapDatabaseError,
} from './errors.js';
import { neverSent } from './never-sent.js';

// What a failed enqueue is told as: whether the job may exist, and why.

/**
 * A key held by another job (mode 'error') becomes a DuplicateJobError, a value
 * enqueue_job() refuses (22023) a ValidationError; anything else is wrapped as usual.
 * `committed` says whose commit it was: for an enqueue that committed on its own
 * (no `tx`), a lost connection leaves the caller unsure whether the job exists,
 * and the message says so (outside review 87).
 */
export function enqueueError(err: unknown, context: string, committed: 'own' | 'caller', batch = false, waitable = false): Error {
  // pg calls the violated index `constraint`, postgres.js `constraint_name`.
  const e = err as { code?: string; constraint?: string; constraint_name?: string; detail?: string; message?: string } | null;
  if (e?.code === '23505' && (e.constraint ?? e.constraint_name) === 'jobs_job_key_idx') {
    // The DETAIL, or the message where a driver kept none (Prisma): "job 5 already holds key k".
    const existing = (/existing job id: (\d+)/.exec(e.detail ?? '') ?? /job (\d+) already holds key/.exec(e.message ?? ''))?.[1];
    const key = /holds key (.*)$/.exec(e.message ?? '')?.[1];
    return new DuplicateJobError(`${context}: ${e.message}`, existing, key, { cause: err });
  }
  // enqueue_job()'s own checks (a key's holder of another task in 'replace' mode).
  if (e?.code === '22023') return new ValidationError(`${context}: ${e.message}`, { cause: err });
  // A role granted before migration 0045 may insert jobs but not their flag.
  if (waitable && isInsufficientPrivilege(err))
    return new DatabaseError(`${context}: ${e?.message}${WAITABLE_REFUSED}`, '42501', { cause: err });
  const wrapped = wrapDatabaseError(err, context);
  if (!(wrapped instanceof ConnectionError)) return wrapped;
  const message = err instanceof SluiceError ? `${context}: ${wrapped.message}` : wrapped.message;
  // No connection was made: the job cannot exist, and the "may exist" warning misled (outside review 101).
  const jobs = batch ? 'the jobs were' : 'the job was';
  // In the caller's transaction, whether anything commits is the caller's to find out.
  const sent = neverSent(err) ? 'nothing was sent' : undefined;
  if (committed === 'caller') return sent ? new NotSentError(`${message}; ${sent}`, { cause: err }) : wrapped;
  if (sent) return new NotSentError(`${message}; ${sent}, so ${jobs} not enqueued`, { cause: err });
  // A batch is one statement: all of its jobs exist, or none.
  const exist = batch ? 'the jobs exist all the same, every one of the batch,' : 'the job exists all the same';
  return new ConnectionError(
    `${message}; ${exist} if Postgres ran the statement (a reply lost on the way, ` +
      'or a cancel that did not arrive): give jobs a jobKey to retry without a duplicate',
    { cause: err },
  );
}

const WAITABLE_REFUSED =
  ' (a waitable job is inserted with notify_on_finish set, a column whose privilege roles.sql grants ' +
  'since migration 0045: re-apply roles.sql of this version, or enqueue without waitable)';

/**
 * A failed insert of enqueueAfterCommit's `jobs` jobs, after the caller's work
 * resolved: said as what it is, their transaction committed and the jobs may be
 * lost (outside review 124: the plain enqueue message read like a failure of
 * that transaction). Any failure, not only a lost connection: a DuplicateJobError
 * there read as if nothing had committed (outside review 177). A lost connection
 * becomes a new error of its class; another Sluice error keeps its class and
 * fields, its message prefixed (it was made for this call alone).
 */
export function afterCommitError(err: unknown, jobs: number): unknown {
  if (jobs === 0 || !(err instanceof SluiceError)) return err;
  const message = `enqueueAfterCommit: work() resolved (taken to mean your transaction committed), then enqueueing its ${jobs} job(s) failed: ${err.message}`;
  if (!(err instanceof ConnectionError)) {
    err.message = message;
    return err;
  }
  const Failed = err instanceof NotSentError ? NotSentError : ConnectionError;
  return new Failed(message, { cause: err });
}
