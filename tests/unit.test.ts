import { describe, expect, it } from 'vitest';
import { retryDelayMs } from '../src/worker/backoff.js';
import { serializePayload } from '../src/payload.js';
import { describeError } from '../src/worker/run.js';
import { describeTarget } from '../src/db/connection.js';
import { quoteSchema } from '../src/db/identifiers.js';
import { ValidationError, ConfigError, isConnectionFailure } from '../src/errors.js';

describe('retryDelayMs', () => {
  const opts = { baseMs: 1_000, maxMs: 60_000 };
  it('doubles per attempt between half and the full nominal delay', () => {
    expect(retryDelayMs(1, opts, () => 0)).toBe(500);
    expect(retryDelayMs(1, opts, () => 1)).toBe(1_000);
    expect(retryDelayMs(3, opts, () => 0)).toBe(2_000);
    expect(retryDelayMs(3, opts, () => 1)).toBe(4_000);
  });
  it('is capped', () => {
    expect(retryDelayMs(50, opts, () => 1)).toBe(60_000);
    expect(retryDelayMs(5_000, opts, () => 1)).toBe(60_000);
  });
  it('grows linearly or stays fixed when the shape says so, still capped', () => {
    const linear = { ...opts, shape: 'linear' as const };
    expect([1, 2, 3, 10].map((n) => retryDelayMs(n, linear, () => 1))).toEqual([1_000, 2_000, 3_000, 10_000]);
    expect(retryDelayMs(100, linear, () => 1)).toBe(60_000);
    const fixed = { ...opts, shape: 'fixed' as const };
    expect([1, 2, 30].map((n) => retryDelayMs(n, fixed, () => 1))).toEqual([1_000, 1_000, 1_000]);
    expect(retryDelayMs(7, fixed, () => 0)).toBe(500);
  });
});

describe('serializePayload', () => {
  it('keeps plain JSON', () => {
    expect(serializePayload({ a: [1, 'x', null, { b: true }] })).toBe('{"a":[1,"x",null,{"b":true}]}');
    expect(serializePayload(undefined)).toBe('{}');
  });
  it.each([
    ['bigint', { n: 1n }],
    ['function', { f: () => 0 }],
    ['symbol', { s: Symbol('x') }],
    ['infinity', { n: Infinity }],
    ['NUL', { s: '\u0000' }],
  ])('refuses %s', (_name, payload) => {
    expect(() => serializePayload(payload)).toThrow(ValidationError);
  });
  it('enforces the size limit in bytes', () => {
    expect(() => serializePayload({ s: 'é'.repeat(10) }, 20)).toThrow(/over the limit of 20/);
    expect(() => serializePayload({ s: '😀'.repeat(5) }, 22)).toThrow(/is 28 bytes, over the limit of 22/);
    expect(serializePayload({ s: 'é'.repeat(10) }, 28)).toBe(`{"s":"${'é'.repeat(10)}"}`);
  });
  it('refuses what JSON would mangle wherever it sits, naming it', () => {
    class Point {
      constructor(readonly x: number) {}
    }
    const cyclic: Record<string, unknown> = { a: 1 };
    cyclic.self = cyclic;
    const cases: [unknown, RegExp][] = [
      [{ deep: [{ n: NaN }] }, /payload\.n is NaN/],
      [{ list: [1, undefined] }, /payload\.list is an array holding undefined/],
      [{ list: [1, , 3] }, /array holding undefined/], // eslint-disable-line no-sparse-arrays
      [{ m: new Map([[1, 2]]) }, /payload\.m is a Map/],
      [{ inner: { s: new Set([1]) } }, /payload\.s is a Set/],
      [{ ['k\u0000']: 1 }, /contains a NUL character/],
      [{ nested: { s: 'x\ud800y' } }, /payload\.s contains a lone UTF-16 surrogate/],
      [[{ f: 1n }], /payload\.f is a bigint/],
      [cyclic, /not JSON-serialisable/],
      [{ p: new Point(Infinity) }, /payload\.x is Infinity/],
    ];
    class Listed extends Array {
      toJSON() {
        return { n: NaN };
      }
    }
    const twice: Record<string, unknown> = {};
    twice.a = twice;
    twice.b = twice;
    cases.push(
      [{ s: new String('a\u0000b') }, /payload\.s contains a NUL character/],
      [{ s: new String('\ud800') }, /payload\.s contains a lone UTF-16 surrogate/],
      [{ n: new Number(NaN) }, /payload\.n is NaN/],
      [Object.assign([1], { toJSON: () => Infinity }), /payload is Infinity/],
      [{ list: Listed.from([1]) }, /payload\.n is NaN/],
      [{ a: Object.assign([1], { toJSON: () => 1n }) }, /payload\.a is a bigint/],
      // A value that holds itself twice: found at once, not walked 2^depth times.
      [twice, /not JSON-serialisable/],
      [
        {
          get boom() {
            throw new Error('getter failed');
          },
        },
        /not JSON-serialisable: getter failed/,
      ],
    );
    for (const [payload, message] of cases) expect(() => serializePayload(payload)).toThrow(message);
    for (const [payload] of cases) expect(() => serializePayload(payload)).toThrow(ValidationError);
  });
  it('serialises what JSON keeps as JSON.stringify does', () => {
    const at = new Date('2026-01-02T03:04:05.000Z');
    class Point {
      constructor(readonly x: number) {}
    }
    const cases: unknown[] = [
      { at, n: [1.5, -0, 'a'], o: Object.assign(Object.create(null) as object, { b: false }) },
      { skipped: undefined, kept: null },
      { withToJSON: { toJSON: () => ({ replaced: true }) } },
      { p: new Point(2) },
      // A literal backslash before "u0000" is text Postgres stores, not a NUL.
      { s: '\\u0000 and \\ud800' },
      { pair: '😀' },
      'a string',
      // Deeper than the walk goes: the replacer serialises it.
      Array.from({ length: 80 }).reduce<unknown>((inner) => [inner], 1),
    ];
    for (const payload of cases) expect(serializePayload(payload)).toBe(JSON.stringify(payload));
  });
});

describe('describeError', () => {
  it('keeps stacks and describes non-errors', () => {
    expect(describeError(new Error('boom'))).toMatch(/^Error: boom\n\s+at /);
    expect(describeError({ code: 7 })).toBe('non-Error thrown: {"code":7}');
    expect(describeError('x'.repeat(10_000)).length).toBeLessThan(8_010);
  });
});

describe('connection helpers', () => {
  it('never shows the password', () => {
    expect(describeTarget('postgres://me:secret@db.example:6543/app')).toBe('db.example:6543/app');
  });
  it('recognises connection failures', () => {
    expect(isConnectionFailure(Object.assign(new Error('x'), { code: 'ECONNREFUSED' }))).toBe(true);
    expect(isConnectionFailure(Object.assign(new Error('x'), { code: '57P01' }))).toBe(true);
    expect(isConnectionFailure(Object.assign(new Error('x'), { code: '23505' }))).toBe(false);
  });
  it('quotes schema names', () => {
    expect(quoteSchema('a"b')).toBe('"a""b"');
    expect(() => quoteSchema('')).toThrow(ConfigError);
  });
});
