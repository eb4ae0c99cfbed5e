import { ValidationError } from './errors.js';
import { unstorableText } from './validate.js';

export const DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024;

/**
 * Turns a payload into the JSON text stored in `payload jsonb`, refusing what JSON
 * would silently drop or mangle: a BigInt, a function, a symbol, NaN/Infinity, a
 * Map or Set (JSON makes them `{}`), undefined inside an array (JSON makes it
 * null), a circular reference, and strings Postgres cannot store (NUL, lone
 * surrogates). An undefined payload means "no payload" and is stored as `{}`;
 * undefined object properties are left out, as JSON.stringify always does.
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
      if (value instanceof Map || value instanceof Set) {
        throw new ValidationError(`${what}${key ? `.${key}` : ''} is a ${value.constructor.name}, which JSON turns into {}`);
      }
      if (Array.isArray(value) && value.includes(undefined)) {
        throw new ValidationError(`${what}${key ? `.${key}` : ''} is an array holding undefined, which JSON turns into null`);
      }
      for (const text of [key, value]) {
        const unstorable = typeof text === 'string' ? unstorableText(text) : undefined;
        if (unstorable) throw new ValidationError(`${what}${key ? `.${key}` : ''} contains ${unstorable}`);
      }
      return value;
    });
  } catch (err) {
    if (err instanceof ValidationError) throw err;
    throw new ValidationError(`${what} is not JSON-serialisable: ${(err as Error).message}`, { cause: err });
  }
  if (text === undefined) throw new ValidationError(`${what} is not JSON-serialisable`);
  const bytes = Buffer.byteLength(text);
  if (bytes > maxBytes) throw new ValidationError(`${what} is ${bytes} bytes, over the limit of ${maxBytes}`);
  return text;
}
