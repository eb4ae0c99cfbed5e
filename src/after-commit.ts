import type { StandardSchemaV1 } from './standard-schema.js';
import { ValidationError } from './errors.js';
import type { AnyTasks, JobSpec, TaskMap } from './job.js';
import { readInput, toJobValues, type JobValues } from './job-values.js';
import { addBatchKey, refuseWaitableBesideKeys } from './enqueue-batch.js';
import { SPEC_KEYS, type AfterCommitJobs } from './queue-options.js';
import { validateStored } from './task-schemas.js';
import { checks } from './validate.js';

/** Jobs are input: ValidationError. */
const input = checks(ValidationError);

/**
 * The jobs a `work` of Queue.enqueueAfterCommit collects through `jobs`: each
 * checked at its call, as enqueueMany would check it, while the caller can still
 * roll back, and kept as it was then (its values made at the call: an object
 * reused for each job gave every job the last one's payload, outside review 223;
 * a Date changed after the call its runAt, outside review 225).
 */
export class AfterCommitCollector<T extends TaskMap = AnyTasks> {
  /** Each job's values, and whether its schema refused it. */
  private readonly jobsSoFar: { values: JobValues; refused?: true }[] = [];
  /** Schema checks still running (settled, never rejecting). */
  private readonly checks: Promise<void>[] = [];
  private readonly keys = new Set<string>();
  private waitable = false;
  private collecting = true;

  constructor(
    private readonly schemas: ReadonlyMap<string, StandardSchemaV1>,
    private readonly maxPayloadBytes: number,
  ) {}

  readonly jobs: AfterCommitJobs<T> = {
    enqueue: async (task, ...[payload, options = {}]) => {
      // A call after `work` settled would be collected by no one: a silent loss (outside review 43).
      if (!this.collecting) {
        throw new ValidationError(
          'enqueueAfterCommit: jobs.enqueue() was called after work() settled; its job would never be inserted (await it inside work)',
        );
      }
      const v = readInput('enqueueAfterCommit', () => {
        const spec = { ...options, task, payload } as JobSpec;
        input.rejectUnknownKeys(spec, SPEC_KEYS, 'enqueueAfterCommit');
        return toJobValues(spec, this.maxPayloadBytes);
      });
      // A key twice, refused now while the caller can roll back: after its commit it lost every job (outside review 177).
      addBatchKey(this.keys, v.job_key, 'enqueueAfterCommit', "is already among this call's jobs; a batch holds each key once");
      refuseWaitableBesideKeys(this.waitable || v.waitable, this.keys.size > 0, 'enqueueAfterCommit');
      this.waitable ||= v.waitable;
      // Collected before its schema is awaited: a jobs.enqueue() not awaited, whose
      // check outlasted work(), resolved and its job was never inserted (outside review 225).
      const job: { values: JobValues; refused?: true } = { values: v };
      this.jobsSoFar.push(job);
      if (this.schemas.size === 0) return;
      const check = validateStored(this.schemas, task, v.payload, payload).catch((err: unknown) => {
        job.refused = true;
        if (v.job_key !== null) this.keys.delete(v.job_key);
        throw err;
      });
      this.checks.push(check.catch(() => {}));
      await check;
    },
  };

  /** `work` settled: no more jobs. */
  stop(): void {
    this.collecting = false;
  }

  /**
   * The jobs to insert, once the checks still running settled (a jobs.enqueue()
   * not awaited): a refused one is left out, as one refused while awaited is; its
   * own call rejects.
   */
  async collected(): Promise<JobValues[]> {
    await Promise.all(this.checks);
    return this.jobsSoFar.filter((job) => !job.refused).map((job) => job.values);
  }
}
