import { ValidationError } from '../errors.js';

/** A route's JSON body: an object (required). */
export function objectBody(body: unknown): Record<string, unknown> {
  if (body === null || typeof body !== 'object' || Array.isArray(body))
    throw new ValidationError('the body must be a JSON object');
  return body as Record<string, unknown>;
}

/**
 * The input of an action: its JSON body (see actionBody), and no query string. A
 * route reads only its body: `retry-failed?queue=q` retried every queue (outside review 84).
 */
export function actionInput(
  req: { body?: unknown; query?: unknown },
  known: readonly string[],
  what: string,
): Record<string, unknown> {
  const query = Object.keys((req.query as object | undefined) ?? {});
  if (query.length > 0) {
    throw new ValidationError(
      `${what}: takes no query string (got ${JSON.stringify(query[0])}); send its options as a JSON body`,
    );
  }
  return actionBody(req.body, known, what);
}

/**
 * The JSON body of an action (none: `{}`) holding only `known` names. An unknown
 * name is refused, as the admin API refuses it: `{"queu": "q"}` to retry-failed
 * retried every failed job of every queue (outside review 83).
 */
export function actionBody(body: unknown, known: readonly string[], what: string): Record<string, unknown> {
  if (body === undefined) return {};
  const fields = objectBody(body);
  const unknown = Object.keys(fields).find((name) => !known.includes(name));
  if (unknown !== undefined) {
    const takes = known.length === 0 ? 'takes no options' : `takes ${known.join(', ')}`;
    throw new ValidationError(`${what}: unknown option ${JSON.stringify(unknown)} (it ${takes})`);
  }
  return fields;
}
