import type { TaskHandler } from '../job.js';
import type { StandardSchemaV1 } from '../standard-schema.js';
import { withPayloadSchema } from '../task-schemas.js';
import { traceHandler } from '../tracing.js';
import type { ResolvedTask } from './task-options.js';

/**
 * One layer around task handlers: given a task and its handler, returns the
 * handler to run instead (or the same one, to leave that task alone). Async so a
 * layer can load an optional dependency once (OpenTelemetry) before wrapping.
 */
export type HandlerMiddleware = (task: string, handler: TaskHandler) => TaskHandler | Promise<TaskHandler>;

/**
 * Wraps every task's handler in `layers`, once, at start-up, and returns new task
 * entries (the resolved config is frozen and left as it was). The first layer
 * wraps the handler itself and the last is outermost: with
 * `[payloadSchemas(schemas), tracing]` the span also covers schema validation.
 *
 * @example
 *   const tasks = await composeHandlers(config.tasks, [
 *     payloadSchemas(schemas),
 *     ...(config.tracing ? [tracing] : []),
 *   ]);
 */
export async function composeHandlers(
  tasks: ReadonlyMap<string, ResolvedTask>,
  layers: readonly HandlerMiddleware[],
): Promise<ReadonlyMap<string, ResolvedTask>> {
  const composed = new Map<string, ResolvedTask>();
  for (const [name, task] of tasks) {
    let handler = task.handler;
    for (const layer of layers) handler = await layer(name, handler);
    composed.set(name, Object.freeze({ ...task, handler }));
  }
  return composed;
}

/**
 * Validates each stored payload with its task's Standard Schema before the
 * handler runs; the handler receives the schema's output. A payload that does
 * not fit fails the job at once (PermanentFailure). Tasks without a schema are
 * left alone: one schemas object may serve the whole application.
 */
export function payloadSchemas(schemas: ReadonlyMap<string, StandardSchemaV1>): HandlerMiddleware {
  return (task, handler) => (schemas.has(task) ? withPayloadSchema(schemas, task, handler) : handler);
}

/**
 * Runs each handler inside an OpenTelemetry CONSUMER span (see traceHandler);
 * leaves handlers unchanged when @opentelemetry/api is not installed or no tracer
 * provider is registered when the worker starts.
 */
export const tracing: HandlerMiddleware = (task, handler) => traceHandler(task, handler);
