import type { FastifyError } from 'fastify';
import { ValidationError } from '../errors.js';

/**
 * Fastify's own refusals of a request, in the API's terms: its `FST_` codes and
 * messages are the framework's, and "Body is not valid JSON" was wrong for valid
 * JSON holding `__proto__`, which Fastify refuses on purpose (outside review 169).
 */
const KNOWN: Record<string, { code: string; message: string }> = {
  FST_ERR_CTP_EMPTY_JSON_BODY: { code: 'BAD_REQUEST', message: 'the body is empty: send a JSON object, e.g. {}' },
  FST_ERR_CTP_INVALID_JSON_BODY: {
    code: 'BAD_REQUEST',
    message: 'the body is not valid JSON, or holds a "__proto__" or "constructor.prototype" key (refused)',
  },
  FST_ERR_CTP_INVALID_MEDIA_TYPE: { code: 'UNSUPPORTED_MEDIA_TYPE', message: 'send the body as application/json' },
  FST_ERR_CTP_BODY_TOO_LARGE: { code: 'PAYLOAD_TOO_LARGE', message: 'the body is too large' },
};

/** The status, code and message an error of Fastify's own is answered with. */
export function requestError(err: FastifyError): { status: number; code: string; message: string } {
  const status = err.statusCode && err.statusCode >= 400 && err.statusCode < 500 ? err.statusCode : 500;
  if (status === 500) return { status, code: 'INTERNAL', message: err.message };
  const known = err.code === undefined ? undefined : KNOWN[err.code];
  return { status, code: known?.code ?? 'BAD_REQUEST', message: known?.message ?? err.message };
}

/**
 * A ValidationError for a query parameter given twice, or one a route does not take:
 * a repeated one reached the route as an array (?queue=a&queue=b listed nothing,
 * outside review 125), and a misspelt one was ignored, the route answering as if it
 * had not been given (outside reviews 127, 242: ?staus=failed listed every job,
 * ?tpo=5 the default top 20 groups).
 */
export function refuseUnknownQuery(query: object, takes: ReadonlySet<string>, what = 'filter'): void {
  const repeated = Object.entries(query).find(([, value]) => Array.isArray(value));
  if (repeated) throw new ValidationError(`${repeated[0]} must be given once`);
  const unknown = Object.keys(query).find((name) => !takes.has(name));
  if (unknown !== undefined) {
    throw new ValidationError(`unknown ${what} ${JSON.stringify(unknown)} (it takes ${[...takes].join(', ') || 'none'})`);
  }
}
