import { types } from 'node:util';
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
  let text: string | undefined;
  // Counts down a lower bound of the text's size while the value is walked, so a
  // value far over the limit (a small object that repeats one big part many times)
  // is refused after about maxBytes of work, not after serialising all of it.
  const budget = newBudget(maxBytes, what);
  try {
    text = isPlain(payload, [], budget) ? JSON.stringify(payload) : undefined;
  } catch {
    // A getter or a proxy that throws: the replacer below says what failed.
    text = undefined;
  }
  if (budget.left < 0) throw overLimit(budget);
  if (text === undefined || UNSTORABLE_ESCAPE.test(text)) text = serializeChecked(payload, newBudget(maxBytes, what));
  // What the replacer cannot see (a value that changed between reads, an exotic
  // object) must still never reach Postgres: one such text fails the statement
  // that writes a whole batch of results.
  if (UNSTORABLE_ESCAPE.test(text)) {
    throw new ValidationError(`${what} contains a NUL character or a lone UTF-16 surrogate, which Postgres cannot store`);
  }
  // A UTF-16 unit is at most 3 bytes of UTF-8: short texts need no count.
  const bytes = text.length * 3 <= maxBytes ? 0 : Buffer.byteLength(text);
  if (bytes > maxBytes) throw new ValidationError(`${what} is ${bytes} bytes, over the limit of ${maxBytes}`);
  return text;
}

/**
 * The escapes JSON.stringify writes for a NUL and for a lone surrogate (it writes
 * a surrogate pair as is), which jsonb refuses; not when the backslash is itself
 * escaped (the text "\\u0000" is a backslash followed by "u0000").
 */
const UNSTORABLE_ESCAPE = /(?<!\\)(?:\\\\)*\\u(?:0000|d[89a-f])/;
/** Deeper than this, the walk leaves the value to the replacer. */
const MAX_PLAIN_DEPTH = 64;

/**
 * True when JSON.stringify keeps `value` as it is: plain objects and arrays of
 * JSON values, without toJSON, boxed primitives or cycles (`ancestors`: the
 * objects on the path from the root, so a value holding itself twice is not
 * walked again and again).
 */
function isPlain(value: unknown, ancestors: object[], budget: Budget): boolean {
  switch (typeof value) {
    case 'string':
      return (budget.left -= value.length) >= 0;
    case 'boolean':
      return (budget.left -= 1) >= 0;
    case 'number':
      return Number.isFinite(value) && (budget.left -= 1) >= 0;
    case 'object': {
      if (value === null) return (budget.left -= 1) >= 0;
      // An object or array, an empty one too, is at least a character of the text.
      if ((budget.left -= 1) < 0) return false;
      if (ancestors.length >= MAX_PLAIN_DEPTH || ancestors.includes(value)) return false;
      const proto: unknown = Object.getPrototypeOf(value);
      // JSON.stringify calls toJSON wherever it is found, as a Get does.
      if (typeof (value as { toJSON?: unknown }).toJSON === 'function') return false;
      ancestors.push(value);
      let plain = true;
      if (proto === Array.prototype) {
        const list = value as unknown[];
        for (let i = 0; i < list.length && plain; i++) {
          const item = list[i];
          plain = item !== undefined && isPlain(item, ancestors, budget);
        }
      } else if (proto === Object.prototype || proto === null) {
        const record = value as Record<string, unknown>;
        for (const key in record) {
          const item = record[key];
          if (item !== undefined && (!isPlain(item, ancestors, budget) || (budget.left -= key.length) < 0)) {
            plain = false;
            break;
          }
        }
      } else {
        plain = false;
      }
      ancestors.pop();
      return plain;
    }
    default:
      return false;
  }
}

/**
 * The bytes a payload's text may still take. What is counted is a lower bound of
 * the text: each string's and each object key's UTF-16 units (a byte or more each
 * in UTF-8) and one per other value, never quotes, commas or escapes.
 */
interface Budget {
  left: number;
  readonly limit: number;
  readonly what: string;
}

function newBudget(limit: number, what: string): Budget {
  return { left: limit, limit, what };
}

function overLimit(budget: Budget): ValidationError {
  return new ValidationError(`${budget.what} is over the limit of ${budget.limit} bytes`);
}

/** JSON.stringify with a replacer that refuses, and names, what JSON would drop or mangle. */
function serializeChecked(payload: unknown, budget: Budget): string {
  const { what } = budget;
  let text: string | undefined;
  try {
    text = JSON.stringify(payload, function (this: unknown, key, boxed: unknown) {
      // JSON unwraps new String(..), new Number(..) and new Boolean(..) (of any realm)
      // after the replacer, as ToString, ToNumber and the boolean inside: check what it will write.
      const value = types.isStringObject(boxed)
        ? String(boxed)
        : types.isNumberObject(boxed)
          ? Number(boxed)
          : types.isBooleanObject(boxed)
            ? Boolean.prototype.valueOf.call(boxed)
            : boxed;
      // An array's keys (its indexes) are not in the text, nor an undefined member.
      const cost =
        value === undefined ? 0 : (Array.isArray(this) ? 0 : key.length) + (typeof value === 'string' ? value.length : 1);
      if ((budget.left -= cost) < 0) throw overLimit(budget);
      // A key Postgres cannot store is shown escaped: the message is logged and stored too (outside review 142).
      const at = key ? `${what}.${unstorableText(key) ? JSON.stringify(key) : key}` : what;
      // The replacer sees what toJSON made: an invalid Date's is null (outside review 74).
      const original = (this as Record<string, unknown>)[key];
      if (types.isDate(original) && Number.isNaN(Date.prototype.getTime.call(original))) {
        throw new ValidationError(`${at} is an invalid Date, which JSON turns into null`);
      }
      const type = typeof value;
      if (type === 'bigint' || type === 'function' || type === 'symbol') {
        throw new ValidationError(`${at} is a ${type}, which is not JSON`);
      }
      if (typeof value === 'number' && !Number.isFinite(value)) {
        throw new ValidationError(`${at} is ${value}, which is not JSON`);
      }
      if (types.isMap(value) || types.isSet(value)) {
        throw new ValidationError(`${at} is a ${types.isMap(value) ? 'Map' : 'Set'}, which JSON turns into {}`);
      }
      const mangled = mangledObject(value);
      if (mangled) throw new ValidationError(`${at} is ${mangled}`);
      if (Array.isArray(value) && value.includes(undefined)) {
        throw new ValidationError(`${at} is an array holding undefined, which JSON turns into null`);
      }
      for (const text of [key, value]) {
        const unstorable = typeof text === 'string' ? unstorableText(text) : undefined;
        if (unstorable) throw new ValidationError(`${at} contains ${unstorable}`);
      }
      return value;
    });
  } catch (err) {
    if (err instanceof ValidationError) throw err;
    if (err instanceof RangeError && /call stack/i.test(err.message)) {
      throw new ValidationError(`${what} is nested too deeply to be serialised (${err.message})`, { cause: err });
    }
    throw new ValidationError(`${what} is not JSON-serialisable: ${(err as Error).message}`, { cause: err });
  }
  if (text === undefined) throw new ValidationError(`${what} is not JSON-serialisable`);
  return text;
}

/**
 * What JSON would make of a built-in object that has no toJSON, where that loses
 * what it holds (outside review 43: an Error in a payload was stored as {}, its
 * message gone); undefined for anything else, class instances included.
 */
function mangledObject(value: unknown): string | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  // instanceof too: a DOMException, or an object made from Error.prototype, is no native error.
  if (types.isNativeError(value) || value instanceof Error) {
    return 'an Error, which JSON turns into {} (its message and stack are not enumerable)';
  }
  if (types.isRegExp(value)) return 'a RegExp, which JSON turns into {}';
  if (
    types.isWeakMap(value) ||
    types.isWeakSet(value) ||
    types.isPromise(value) ||
    value instanceof WeakRef ||
    value instanceof FinalizationRegistry
  ) {
    return 'an object JSON turns into {}';
  }
  if (types.isAnyArrayBuffer(value) || types.isArrayBufferView(value)) {
    return 'binary data (an ArrayBuffer or a typed array), which JSON turns into {} or an object keyed by index';
  }
  return undefined;
}
