/**
 * The option checks every part of Sluice shares. The error they throw is the
 * caller's choice: constructors and start-up options throw ConfigError (a
 * programming mistake), call-time arguments of the admin API and the CLI throw
 * ValidationError (bad input). The messages are the same either way.
 *
 * @example
 *   const { intOption, rejectUnknownKeys } = checks(ConfigError);
 *   rejectUnknownKeys(options, KEYS, 'Worker');
 *   const concurrency = intOption('concurrency', options.concurrency, 10, 1, 10_000);
 */
import { inspect, types } from 'node:util';

/** An error class the checks can throw: SluiceError subclasses such as ConfigError or ValidationError. */
export type ErrorClass = new (message: string, options?: { cause?: unknown }) => Error;

export const DEFAULT_SCHEMA = 'sluice';
/** Longest queue, task or worker name. */
export const MAX_NAME_LENGTH = 128;
/**
 * Longest schema name, in bytes. The notification channel is 'sluice:' + schema
 * and Postgres caps channel names at 63 bytes, so the schema is kept well under that.
 */
export const MAX_SCHEMA_LENGTH = 50;

export interface OptionChecks {
  /** Rejects keys that are not options (a typo must not silently mean "default"). */
  rejectUnknownKeys(value: object, known: ReadonlySet<string>, what: string): void;
  /** An integer option within [min, max], or its default when undefined. */
  intOption(name: string, value: unknown, fallback: number, min: number, max: number): number;
  /** A boolean option, or its default when undefined. */
  boolOption(name: string, value: unknown, fallback: boolean): boolean;
  /**
   * Checks a queue, task or worker name: non-empty, at most 128 characters,
   * storable as is. Any other character is fine, quotes and semicolons included:
   * names only ever travel as bound parameters, so they are stored and matched verbatim.
   */
  checkName(kind: string, name: unknown): string;
  /**
   * Checks a schema name. Postgres takes any name that is non-empty, has no NUL
   * and does not start with pg_; Sluice also needs it storable as is, at most 50
   * bytes, and free of dollar-quote tags ($$, $tag$): the migrations splice the
   * quoted name into dollar-quoted function bodies, which such a tag would end.
   */
  checkSchemaName(schema: unknown): string;
  /** The `schema` option: a valid schema name, or 'sluice' when undefined. */
  schemaOption(schema: unknown): string;
}

/** The shared option checks, throwing `ErrorClass`. */
/** How many names that passed checkName are remembered, to skip checking them again. */
const GOOD_NAMES_KEPT = 64;

export function checks(ErrorClass: ErrorClass): OptionChecks {
  function fail(message: string): never {
    throw new ErrorClass(message);
  }
  /** Names that passed checkName, the most recent first few only. */
  const goodNames = new Set<string>();

  function checkSchemaName(schema: unknown): string {
    if (typeof schema !== 'string' || schema.length === 0) fail('schema must be a non-empty string');
    const unstorable = unstorableText(schema);
    if (unstorable) fail(`schema name ${JSON.stringify(schema)} contains ${unstorable}`);
    if (Buffer.byteLength(schema) > MAX_SCHEMA_LENGTH) fail(`schema name is longer than ${MAX_SCHEMA_LENGTH} bytes: ${schema}`);
    if (schema.startsWith('pg_'))
      fail(`schema name ${JSON.stringify(schema)} starts with pg_, which Postgres reserves for system schemas`);
    // The SQL standard's views, which every role reads: a superuser's migrate put Sluice's tables
    // among them (outside review 248).
    if (schema === 'information_schema')
      fail('schema name "information_schema" is the SQL standard\'s system schema: choose another');
    const tag = DOLLAR_QUOTE_TAG.exec(schema);
    if (tag) {
      fail(
        `schema name ${JSON.stringify(schema)} contains the dollar-quote tag ${tag[0]}, which would end the function bodies of the migrations it is spliced into`,
      );
    }
    return schema;
  }

  return {
    rejectUnknownKeys(value, known, what) {
      // Typed as an object, but a caller in plain JavaScript may pass null or a string.
      if (typeof value !== 'object' || value === null || Array.isArray(value)) {
        fail(`${what}: options must be an object, got ${shown(value)}`);
      }
      for (const key of Object.keys(value)) {
        if (!known.has(key)) fail(`${what}: unknown option "${key}"`);
      }
    },

    intOption(name, value, fallback, min, max) {
      if (value === undefined) return fallback;
      if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
        fail(`${name} must be an integer from ${min} to ${max}, got ${shown(value)}`);
      }
      return value;
    },

    boolOption(name, value, fallback) {
      if (value === undefined) return fallback;
      if (typeof value !== 'boolean') fail(`${name} must be a boolean`);
      return value;
    },

    checkName(kind, name) {
      // A batch names the same task and queue in every job: each is checked once.
      if (typeof name === 'string' && goodNames.has(name)) return name;
      // Characters as Postgres counts them (code points), not UTF-16 units: an emoji
      // is one. There are never more code points than UTF-16 units.
      if (
        typeof name !== 'string' ||
        name.length === 0 ||
        (name.length > MAX_NAME_LENGTH && [...name].length > MAX_NAME_LENGTH)
      ) {
        fail(`${kind} must be a string of 1 to ${MAX_NAME_LENGTH} characters, got ${shown(name)}`);
      }
      const unstorable = unstorableText(name);
      if (unstorable) fail(`${kind} ${shown(name)} contains ${unstorable}`);
      if (goodNames.size >= GOOD_NAMES_KEPT) goodNames.clear();
      goodNames.add(name);
      return name;
    },

    checkSchemaName,

    schemaOption(schema) {
      if (schema === undefined) return DEFAULT_SCHEMA;
      if (typeof schema !== 'string') fail('schema must be a string');
      return checkSchemaName(schema);
    },
  };
}

/**
 * Runs `read` over a caller's input or options: whatever reading them throws (a
 * Proxy whose traps throw, a revoked one, a throwing getter) becomes an
 * `ErrorClass` error that says so, with the original as its cause; errors of
 * `ErrorClass` (the checks' own) pass as they are.
 */
export function readOrFail<R>(ErrorClass: ErrorClass, what: string, read: () => R): R {
  try {
    return read();
  } catch (err) {
    if (err instanceof ErrorClass) throw err;
    throw new ErrorClass(`${what}: ${unreadable(err)}`, { cause: err });
  }
}

/** What a read of a caller's input that threw `err` is reported as. */
export function unreadable(err: unknown): string {
  return `the input cannot be read (${shown(errorMessage(err))})`;
}

/**
 * Why `value` is not a plain object, as the end of "must be a plain object ({ ... })"
 * (", not a Map"); undefined when it is one: its prototype is Object.prototype (of
 * any realm: its own prototype is null) or null.
 */
function notPlainObject(value: object): string | undefined {
  const proto: unknown = Object.getPrototypeOf(value);
  if (proto === null || Object.getPrototypeOf(proto) === null) return undefined;
  const kind = (proto as { constructor?: { name?: unknown } }).constructor?.name;
  return typeof kind === 'string' && kind !== 'Object' && kind !== '' ? `, not a ${kind}` : '';
}

/**
 * A plain copy of an options object, every property read once (a getter or a
 * Proxy trap that throws fails here, inside readOrFail, not later at an odd
 * place). Non-objects and arrays are returned as they are, for the caller's own
 * "options must be an object" check. An object that is not a plain one (a Map, a
 * class instance, Object.create(defaults)) is refused: the options it holds on
 * its prototype were left out, and a bulk action's filter with them (outside
 * review 170: retryFailed(Object.create({ queue: 'fa' })) retried every queue).
 * Own properties count whether enumerable or not.
 */
export function snapshotOptions<O>(options: O, ErrorClass: ErrorClass, what: string): O {
  if (typeof options !== 'object' || options === null || Array.isArray(options)) return options;
  const notPlain = notPlainObject(options);
  if (notPlain !== undefined) throw new ErrorClass(`${what}: options must be a plain object ({ ... })${notPlain}`);
  const copy: Record<string, unknown> = {};
  for (const key of Object.getOwnPropertyNames(options)) copy[key] = (options as Record<string, unknown>)[key];
  return copy as O;
}

function errorMessage(err: unknown): unknown {
  try {
    return err instanceof Error ? err.message : err;
  } catch {
    return 'an error that cannot be read';
  }
}

/**
 * A rejected value as an error message shows it: strings quoted (so '2' is not
 * mistaken for 2), and cut short, so a 100,000-character value does not make a
 * 100,000-character message.
 */
export function shown(value: unknown): string {
  // A boxed primitive (new Boolean(true)) printed as its value read "must be a boolean, got true".
  const boxed = boxedKind(value);
  if (boxed) return `a ${boxed} object (${shown((value as { valueOf(): unknown }).valueOf())})`;
  if (typeof value !== 'string') {
    if (typeof value === 'number' || typeof value === 'boolean') return String(value);
    try {
      return JSON.stringify(value) ?? String(value);
    } catch {
      // A bigint, a cycle, a throwing toJSON or a Proxy: inspect() shows what it is without running its code.
      return inspect(value, { depth: 1, breakLength: Infinity, customInspect: false });
    }
  }
  const chars = [...value];
  if (chars.length <= 60) return JSON.stringify(value);
  return `${JSON.stringify(chars.slice(0, 40).join(''))}… (${chars.length} characters)`;
}

function boxedKind(value: unknown): string | undefined {
  if (types.isBooleanObject(value)) return 'Boolean';
  if (types.isNumberObject(value)) return 'Number';
  if (types.isStringObject(value)) return 'String';
  return undefined;
}

/**
 * A dollar-quote delimiter as Postgres' scanner reads it: $, an optional tag
 * (a letter, _ or any non-ASCII character, then those or digits), $.
 */
const DOLLAR_QUOTE_TAG = /\$(?:[A-Za-z_\u0080-\uffff][A-Za-z0-9_\u0080-\uffff]*)?\$/;

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** Whether `text` holds half of a surrogate pair alone: UTF-8 cannot encode it (Buffer.from writes U+FFFD). */
export function hasLoneSurrogate(text: string): boolean {
  return LONE_SURROGATE.test(text);
}

/**
 * Why Postgres cannot store this text unchanged, or undefined when it can: text
 * columns reject NUL, and a lone UTF-16 surrogate has no UTF-8 form (the driver
 * would silently turn it into U+FFFD, and jsonb rejects its escape).
 */
export function unstorableText(text: string): string | undefined {
  if (text.includes('\0')) return 'a NUL character, which Postgres text cannot store';
  if (hasLoneSurrogate(text)) return 'a lone UTF-16 surrogate, which is not valid Unicode';
  return undefined;
}
