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
 *
 * Most payloads are plain data: those are checked by a walk of their own and
 * serialised by JSON.stringify without a replacer, several times faster than with
 * one (a replacer is a call into JavaScript for every value; measured: the
 * replacer was a third of enqueueMany's JavaScript time). Anything else (a Date,
 * a class instance, a value JSON would mangle) takes the replacer, which also
 * names what is wrong.
 */
export function serializePayload(payload: unknown, maxBytes = DEFAULT_MAX_PAYLOAD_BYTES, what = 'payload'): string {
  if (payload === undefined) return '{}';
  let text = isPlain(payload, 0) ? JSON.stringify(payload) : undefined;
  // JSON.stringify writes NUL and lone surrogates as escapes; a match may also be an
  // escaped backslash followed by "u0000", which the replacer then lets through.
  if (text === undefined || UNSTORABLE_ESCAPE.test(text)) text = serializeChecked(payload, what);
  // A UTF-16 unit is at most 3 bytes of UTF-8: short texts need no count.
  const bytes = text.length * 3 <= maxBytes ? 0 : Buffer.byteLength(text);
  if (bytes > maxBytes) throw new ValidationError(`${what} is ${bytes} bytes, over the limit of ${maxBytes}`);
  return text;
}

const UNSTORABLE_ESCAPE = /\\u(?:0000|d[89a-f])/;
/** Deeper than this, the walk leaves the value to the replacer (which finds a cycle). */
const MAX_PLAIN_DEPTH = 64;

/** True when JSON.stringify keeps `value` as it is: plain objects and arrays of JSON values. */
function isPlain(value: unknown, depth: number): boolean {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return true;
    case 'number':
      return Number.isFinite(value);
    case 'object': {
      if (value === null) return true;
      if (depth >= MAX_PLAIN_DEPTH) return false;
      if (Array.isArray(value)) {
        for (let i = 0; i < value.length; i++) {
          const item: unknown = value[i];
          if (item === undefined || !isPlain(item, depth + 1)) return false;
        }
        return true;
      }
      const proto: unknown = Object.getPrototypeOf(value);
      if (proto !== Object.prototype && proto !== null) return false;
      const record = value as Record<string, unknown>;
      if ('toJSON' in record) return false;
      for (const key in record) {
        const item = record[key];
        if (item !== undefined && !isPlain(item, depth + 1)) return false;
      }
      return true;
    }
    default:
      return false;
  }
}

/** JSON.stringify with a replacer that refuses, and names, what JSON would drop or mangle. */
function serializeChecked(payload: unknown, what: string): string {
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
  return text;
}
