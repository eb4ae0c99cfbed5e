import { createRequire } from 'node:module';
import pg from 'pg';

/*
 * Two conversions node-postgres makes for every row and every array parameter, done
 * with less garbage for the statements a worker sends thousands of times a second.
 * In a drain of no-op jobs, pg's timestamp parser made about a fifth of everything
 * the worker allocated (a regular-expression match and a string per field, five
 * timestamps per claimed job) and its array encoder another twentieth; that garbage
 * is what makes V8 grow the heap (and the RSS) while a backlog drains. Both give the
 * same values as pg's own, and hand anything unusual to pg.
 */

const TIMESTAMPTZ_OID = 1184;

/** Digits `s[from..from+count)` as a number; -1 if any is not a digit. */
function digits(s: string, from: number, count: number): number {
  let value = 0;
  for (let i = from; i < from + count; i++) {
    const d = s.charCodeAt(i) - 48;
    if (d < 0 || d > 9) return -1;
    value = value * 10 + d;
  }
  return value;
}

/**
 * A timestamptz as Postgres writes it with DateStyle ISO,
 * `YYYY-MM-DD HH:MM:SS[.ffffff]±HH[:MM[:SS]]`, without a regular expression; the
 * same Date as pg's parser (postgres-date), whose arithmetic for the fraction it
 * repeats so that the milliseconds truncate alike. Anything else (infinity, BC,
 * years before 100 or after 9999, another DateStyle) goes to `fallback`.
 */
export function parseTimestamptz(text: string, fallback: (text: string) => unknown): unknown {
  const n = text.length;
  if (n < 22 || text.charCodeAt(4) !== 45 || text.charCodeAt(7) !== 45 || text.charCodeAt(10) !== 32) {
    return fallback(text);
  }
  if (text.charCodeAt(13) !== 58 || text.charCodeAt(16) !== 58) return fallback(text);
  const year = digits(text, 0, 4);
  const month = digits(text, 5, 2);
  const day = digits(text, 8, 2);
  const hour = digits(text, 11, 2);
  const minute = digits(text, 14, 2);
  const second = digits(text, 17, 2);
  if (year < 100 || month < 0 || day < 0 || hour < 0 || minute < 0 || second < 0) return fallback(text);
  let i = 19;
  let ms = 0;
  if (text.charCodeAt(i) === 46) {
    let fraction = 0;
    let scale = 1;
    for (i++; i < n; i++) {
      const d = text.charCodeAt(i) - 48;
      if (d < 0 || d > 9) break;
      fraction = fraction * 10 + d;
      scale *= 10;
    }
    // postgres-date: 1000 * parseFloat('.ffffff'); fraction / scale is that same double.
    if (scale === 1 || scale > 1e6) return fallback(text);
    ms = 1000 * (fraction / scale);
  }
  const sign = text.charCodeAt(i);
  if (sign !== 43 && sign !== 45) return fallback(text);
  // ±HH, ±HH:MM or ±HH:MM:SS, to the end.
  const rest = n - i - 1;
  if (rest !== 2 && rest !== 5 && rest !== 8) return fallback(text);
  const offsetHours = digits(text, i + 1, 2);
  const offsetMinutes = rest < 5 ? 0 : text.charCodeAt(i + 3) === 58 ? digits(text, i + 4, 2) : -1;
  const offsetSeconds = rest < 8 ? 0 : text.charCodeAt(i + 6) === 58 ? digits(text, i + 7, 2) : -1;
  if (offsetHours < 0 || offsetMinutes < 0 || offsetSeconds < 0) return fallback(text);
  const offset = (offsetHours * 3600 + offsetMinutes * 60 + offsetSeconds) * 1000;
  const utc = Date.UTC(year, month - 1, day, hour, minute, second, ms);
  return new Date(sign === 45 ? utc + offset : utc - offset);
}

/**
 * Type parsers for Sluice's statements, on any pool: timestamptz by
 * parseTimestamptz, every other type as pg parses it by default. Not pg's global
 * registry (pg.types), which an application may have changed for its own queries
 * (`setTypeParser(1184, (v) => v)` for timestamps as strings, a jsonb parser): on a
 * pool of yours the worker read its claims through those and ran no job (outside
 * review 69).
 */
export const SLUICE_TYPES = {
  getTypeParser(oid: number, format?: string): (text: string) => unknown {
    if (format !== undefined && format !== 'text') return pg.types.getTypeParser(oid, format as 'binary');
    const pgParser = defaultTextParser(oid);
    if (oid !== TIMESTAMPTZ_OID) return pgParser;
    // Asked once per column of every result: one closure per pg parser, not per call.
    if (timestamptz !== undefined && timestamptz.fallback === pgParser) return timestamptz.parse;
    const parse = (text: string) => parseTimestamptz(text, pgParser);
    timestamptz = { fallback: pgParser, parse };
    return parse;
  },
};

let defaults: Map<number, (text: string) => unknown> | undefined;

/**
 * pg's own text parser for `oid`, as it ships (pg-types' table, read once from the
 * copy pg itself loads); text stays a string. Where that table cannot be loaded (a
 * pg-types of another shape), pg's registry as it stands.
 */
function defaultTextParser(oid: number): (text: string) => unknown {
  if (defaults === undefined) {
    const table = new Map<number, (text: string) => unknown>();
    try {
      const fromPg = createRequire(createRequire(import.meta.url).resolve('pg'));
      const parsers = fromPg('pg-types/lib/textParsers') as { init(register: (oid: number, fn: never) => void): void };
      parsers.init((id, fn: (text: string) => unknown) => table.set(id, fn));
    } catch {
      // Left empty: pg's registry below.
    }
    defaults = table;
  }
  if (defaults.size === 0) return pg.types.getTypeParser(oid, 'text');
  return defaults.get(oid) ?? String;
}

let timestamptz: { fallback: (text: string) => unknown; parse: (text: string) => unknown } | undefined;

/** A string pg would send as is: an integer in decimal (ids travel as text). */
const INTEGER_TEXT = /^-?\d+$/;

/**
 * A Postgres array literal for `values`, when every element is null, a boolean, a
 * safe integer or a string of one: those need no quotes, so the literal is one
 * join. Undefined for anything else, which pg encodes itself (it quotes and escapes
 * every element, a few strings per element).
 */
export function arrayLiteral(values: readonly unknown[]): string | undefined {
  let nulls = false;
  for (const v of values) {
    if (v === null || v === undefined) nulls = true;
    else if (typeof v === 'string') {
      if (!INTEGER_TEXT.test(v)) return undefined;
    } else if (typeof v === 'number') {
      if (!Number.isSafeInteger(v)) return undefined;
    } else if (typeof v !== 'boolean') return undefined;
  }
  if (!nulls) return `{${values.join(',')}}`;
  // join() writes null as an empty string; NULL it must be.
  let literal = '{';
  for (let i = 0; i < values.length; i++) {
    if (i > 0) literal += ',';
    const v = values[i];
    literal += v === null || v === undefined ? 'NULL' : String(v);
  }
  return `${literal}}`;
}

/** `values` with the arrays arrayLiteral can write written by it; the same array if there are none. */
export function encodeArrays(values: unknown[] | undefined): unknown[] | undefined {
  if (!values) return values;
  let out: unknown[] | undefined;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (!Array.isArray(v)) continue;
    const literal = arrayLiteral(v);
    if (literal === undefined) continue;
    out ??= values.slice();
    out[i] = literal;
  }
  return out ?? values;
}
