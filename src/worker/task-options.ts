import { ConfigError } from '../errors.js';
import type { TaskDefinition, TaskHandler, TaskList } from '../job.js';
import { checks } from '../validate.js';
import { BACKOFF_SHAPES, type BackoffOptions } from './backoff.js';

// A worker's tasks as given (a handler, or { handler, timeoutMs, maxAttempts,
// backoff }), checked and frozen; and backoff policies, the worker's and the tasks'.

const { checkName, intOption, rejectUnknownKeys } = checks(ConfigError);

export interface ResolvedTask {
  readonly handler: TaskHandler;
  readonly timeoutMs: number | undefined;
  /** Overrides the job's max_attempts when set. */
  readonly maxAttempts: number | undefined;
  /** Overrides the worker's backoff when set. */
  readonly backoff: Readonly<Required<BackoffOptions>> | undefined;
}

const TASK_KEYS = new Set(['handler', 'timeoutMs', 'maxAttempts', 'backoff']);

export function resolveTasks(tasks: unknown): Map<string, ResolvedTask> {
  if (!tasks || typeof tasks !== 'object') throw new ConfigError('Worker: tasks must be an object of handlers');
  const resolved = new Map<string, ResolvedTask>();
  for (const [name, entry] of Object.entries(tasks as TaskList)) {
    checkName('task', name);
    if (typeof entry === 'function') {
      resolved.set(name, Object.freeze({ handler: entry, timeoutMs: undefined, maxAttempts: undefined, backoff: undefined }));
    } else if (entry && typeof (entry as TaskDefinition).handler === 'function') {
      const def = entry as TaskDefinition;
      rejectUnknownKeys(def, TASK_KEYS, `tasks.${name}`);
      const optional = (key: 'timeoutMs' | 'maxAttempts', max: number) =>
        def[key] === undefined ? undefined : intOption(`tasks.${name}.${key}`, def[key], 0, 1, max);
      resolved.set(
        name,
        Object.freeze({
          handler: def.handler,
          timeoutMs: optional('timeoutMs', 2 ** 31 - 1),
          maxAttempts: optional('maxAttempts', 1000),
          backoff: def.backoff === undefined ? undefined : resolveBackoff(def.backoff, `tasks.${name}.backoff`),
        }),
      );
    } else {
      throw new ConfigError(`Worker: task ${JSON.stringify(name)} must be a function or { handler }`);
    }
  }
  if (resolved.size === 0) throw new ConfigError('Worker: tasks is empty; give at least one handler');
  return resolved;
}

/** Validates a backoff policy, filling in the defaults. */
export function resolveBackoff(backoff: unknown, what: string): Readonly<Required<BackoffOptions>> {
  if (!backoff || typeof backoff !== 'object') throw new ConfigError(`${what} must be an object`);
  rejectUnknownKeys(backoff, new Set(['baseMs', 'maxMs', 'shape']), what);
  const { baseMs: base, maxMs: max, shape = 'exponential' } = backoff as BackoffOptions;
  if (!BACKOFF_SHAPES.includes(shape)) {
    throw new ConfigError(`${what}.shape must be one of ${BACKOFF_SHAPES.join(', ')}, got ${String(shape)}`);
  }
  const baseMs = intOption(`${what}.baseMs`, base, 1_000, 1, 86_400_000);
  const maxMs = intOption(`${what}.maxMs`, max, Math.max(baseMs, 3_600_000), baseMs, 30 * 86_400_000);
  return Object.freeze({ baseMs, maxMs, shape });
}
