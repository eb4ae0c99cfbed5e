import { ConfigError, PermanentFailure, ValidationError } from './errors.js';
import type { TaskHandler, TaskMap } from './job.js';
import type { StandardSchemaV1 } from './standard-schema.js';
import { shown } from './validate.js';

/**
 * A Standard Schema per task (zod 3.24+, valibot, arktype ...), validating
 * payloads at run time. The Queue takes what a schema accepts (its input type:
 * fields with defaults may be left out); handlers receive what it returns.
 */
export type QueueSchemas<T extends TaskMap> = { [K in keyof T]?: StandardSchemaV1<T[K], unknown> };
export type WorkerSchemas<T extends TaskMap> = { [K in keyof T]?: StandardSchemaV1<unknown, T[K]> };

/** The payloads a set of schemas accepts: `Queue<TaskInputsOf<typeof schemas>>`. */
export type TaskInputsOf<S extends Record<string, StandardSchemaV1>> = { [K in keyof S]: StandardSchemaV1.InferInput<S[K]> };
/** The payloads a set of schemas returns: `Worker<TasksOf<typeof schemas>>`. */
export type TasksOf<S extends Record<string, StandardSchemaV1>> = { [K in keyof S]: StandardSchemaV1.InferOutput<S[K]> };

/** Checks that `schemas` is an object of Standard Schemas; returns them by task. */
export function resolveSchemas(schemas: unknown, what: string): Map<string, StandardSchemaV1> {
  const map = new Map<string, StandardSchemaV1>();
  if (schemas === undefined) return map;
  if (!schemas || typeof schemas !== 'object') throw new ConfigError(`${what}: schemas must be an object of task → schema`);
  for (const [task, schema] of Object.entries(schemas)) {
    if (typeof (schema as StandardSchemaV1 | undefined)?.['~standard']?.validate !== 'function') {
      throw new ConfigError(`${what}: schemas.${task} is not a Standard Schema (zod 3.24+, valibot, arktype ...)`);
    }
    map.set(task, schema as StandardSchemaV1);
  }
  return map;
}

/**
 * Validates a payload with its task's schema, when there is one, and returns the
 * schema's output (defaults filled in, transforms applied). Throws a
 * ValidationError that lists the issues.
 */
export async function validatePayload(
  schemas: ReadonlyMap<string, StandardSchemaV1>,
  task: string,
  payload: unknown,
): Promise<unknown> {
  const schema = schemas.get(task);
  if (!schema) return payload;
  let result: StandardSchemaV1.Result<unknown>;
  try {
    result = await schema['~standard'].validate(payload);
  } catch (err) {
    // A schema that throws (a refinement's bug): still a ValidationError, nothing inserted (outside review 221).
    const message = err instanceof Error ? err.message : String(err);
    throw new ValidationError(`payload of task ${JSON.stringify(task)} could not be checked: its schema threw: ${message}`, {
      cause: err,
    });
  }
  // A hand-made schema may answer anything: null was a TypeError, 42 a payload of undefined (outside review 227).
  if (typeof result !== 'object' || result === null || (result.issues === undefined && !('value' in result))) {
    throw new ValidationError(
      `payload of task ${JSON.stringify(task)} could not be checked: its schema returned ${shown(result)}, ` +
        'not a Standard Schema result ({ value } or { issues })',
    );
  }
  if (result.issues !== undefined) {
    throw new ValidationError(`payload of task ${JSON.stringify(task)} is invalid: ${describeIssues(result.issues)}`);
  }
  return result.value;
}

/**
 * The Queue's check: validatePayload of the payload as the worker will read it,
 * `stored`, the JSON text the Queue made of it when it was called (and inserts).
 * Checked as given, a schema that only the value before JSON fits (z.date(): a
 * Date is stored as a string; z.undefined(): a payload left out is stored as {})
 * passed at enqueue and failed every job for good (outside review 221); and a
 * payload changed while the check was awaited was stored unchecked (outside review
 * 223). `given`: the payload as passed, read again only to word the error.
 */
export async function validateStored(
  schemas: ReadonlyMap<string, StandardSchemaV1>,
  task: string,
  stored: string,
  given: unknown,
): Promise<void> {
  if (!schemas.has(task)) return;
  try {
    await validatePayload(schemas, task, JSON.parse(stored));
  } catch (err) {
    // Said apart when the payload as given fits, the only case the issues cannot explain;
    // only while it is still what the call was given (outside review 225: one fixed after
    // the call was told it failed for its JSON).
    const fitsAsGiven =
      sameJson(given, stored) &&
      (await validatePayload(schemas, task, given).then(
        () => true,
        () => false,
      ));
    if (!fitsAsGiven) throw err;
    throw new ValidationError(
      `${(err as Error).message} (the payload fits the schema as given, not as stored: the worker checks its JSON, ` +
        'where a Date is a string and a payload left out is {}; use a schema that takes the JSON form, e.g. z.coerce.date())',
      { cause: err },
    );
  }
}

/**
 * Checks each schedule's payload (JSON text, as its ticks store it) against its
 * task's schema: one it refuses is a ConfigError naming the schedule, at start,
 * where every tick would otherwise fail for good.
 */
export async function checkSchedulePayloads(
  schemas: ReadonlyMap<string, StandardSchemaV1>,
  schedules: readonly { name: string; task: string; payload: string }[],
): Promise<void> {
  for (const s of schedules) {
    if (!schemas.has(s.task)) continue;
    try {
      await validatePayload(schemas, s.task, JSON.parse(s.payload));
    } catch (err) {
      throw new ConfigError(`schedule "${s.name}": ${(err as Error).message}`, { cause: err });
    }
  }
}

/** Whether `given` still makes the JSON text `stored` (a payload left out is stored as {}). */
function sameJson(given: unknown, stored: string): boolean {
  try {
    return (given === undefined ? '{}' : JSON.stringify(given)) === stored;
  } catch {
    return false;
  }
}

/**
 * validateStored for each job of an enqueueMany batch that has a schema, from the
 * text each job's payload was made into; the error names the job's place in the
 * batch. The jobs keep their payloads as given, the schema's input: the worker
 * parses every payload, so one stored as the schema's output was parsed twice, and
 * a schema whose output is not valid input (a transform) failed every job
 * (outside review 179).
 */
export async function validateStoredBatch(
  schemas: ReadonlyMap<string, StandardSchemaV1>,
  jobs: readonly { task: string; payload: string }[],
  given: readonly { payload?: unknown }[],
): Promise<void> {
  await Promise.all(
    jobs.map(async (job, i) => {
      try {
        await validateStored(schemas, job.task, job.payload, given[i]?.payload);
      } catch (err) {
        throw new ValidationError(`enqueueMany: job ${i}: ${(err as Error).message}`, { cause: err });
      }
    }),
  );
}

/**
 * The worker's side: a handler that first validates the stored payload, and hands
 * the result as its first argument and as `ctx.job.payload`. A payload
 * that does not fit fails the job at once (PermanentFailure): no retry fixes it.
 */
export function withPayloadSchema(
  schemas: ReadonlyMap<string, StandardSchemaV1>,
  task: string,
  handler: TaskHandler,
): TaskHandler {
  return async (payload, ctx) => {
    let value: unknown;
    try {
      value = await validatePayload(schemas, task, payload);
    } catch (err) {
      throw new PermanentFailure((err as Error).message, { cause: err });
    }
    // ctx.job is typed with the parsed payload: hand it the parsed one too (outside
    // review 179 found the stored one there). Descriptors, not a spread, so the lazy
    // signal getter stays lazy.
    const parsed = Object.defineProperties({}, Object.getOwnPropertyDescriptors(ctx)) as typeof ctx;
    Object.defineProperty(parsed, 'job', { value: { ...ctx.job, payload: value }, enumerable: true });
    return handler(value, parsed);
  };
}

function describeIssues(issues: unknown): string {
  try {
    const said = (issues as ReadonlyArray<StandardSchemaV1.Issue>)
      .map((issue) => {
        const path = (issue.path ?? []).map((p) => String(typeof p === 'object' ? p.key : p)).join('.');
        return path ? `${path}: ${issue.message}` : issue.message;
      })
      .join('; ');
    return said || 'its schema failed it without saying why (no issues listed)';
  } catch {
    return `its schema failed it with issues that cannot be read: ${shown(issues)}`;
  }
}
