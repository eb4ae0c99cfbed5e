import { ValidationError } from './errors.js';

export const DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024;

/**
 * Turns a payload into the JSON text stored in `payload jsonb`, refusing what JSON
 * would silently drop or mangle: a BigInt, a function, a symbol, undefined at the
 * top, a circular reference, and NUL characters (jsonb cannot store \u0000).
 */
export function serializePayload(payload: unknown, maxBytes = DEFAULT_MAX_PAYLOAD_BYTES, what = 'payload'): string {
  if (payload === undefined) return '{}';
  let text: string | undefined;
  try {
    text = JSON.stringify(payload, (key, value: unknown) => {
      const type = typeof value;
      if (type === 'bigint' || type === 'function' || type === 'symbol') {
        throw new ValidationError(`${what}${key ? `.${key}` : ''} is a ${type}, which is not JSON`);
      }
      if (typeof value === 'number' && !Number.isFinite(value)) {
        throw new ValidationError(`${what}${key ? `.${key}` : ''} is ${value}, which is not JSON`);
      }
      return value;
    });
  } catch (err) {
    if (err instanceof ValidationError) throw err;
    throw new ValidationError(`${what} is not JSON-serialisable: ${(err as Error).message}`, { cause: err });
  }
  if (text === undefined) throw new ValidationError(`${what} is not JSON-serialisable`);
  if (text.includes('\\u0000')) throw new ValidationError(`${what} contains a NUL character, which Postgres jsonb cannot store`);
  const bytes = Buffer.byteLength(text);
  if (bytes > maxBytes) throw new ValidationError(`${what} is ${bytes} bytes, over the limit of ${maxBytes}`);
  return text;
}
