import { describe, expect, it } from 'vitest';
import { retryDelayMs } from '../src/worker/backoff.js';
import { serializePayload } from '../src/payload.js';
import { describeError, Run } from '../src/worker/run.js';
import { toJobValues } from '../src/job-values.js';
import type { JobRow } from '../src/job.js';
import { runInNewContext } from 'node:vm';
import { connectionError, describeTarget, loginProblem } from '../src/db/connection.js';
import { quoteSchema } from '../src/db/identifiers.js';
import { ValidationError, ConfigError, isConnectionFailure, isServerDown, PermanentFailure, Snooze } from '../src/errors.js';
import { neverSent } from '../src/never-sent.js';

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
  it('refuses a delay it cannot compute instead of returning NaN', () => {
    expect(() => retryDelayMs(Number.NaN, opts)).toThrow(ValidationError);
    expect(() => retryDelayMs(1, { baseMs: Number.NaN, maxMs: 1 })).toThrow(/baseMs must be a finite number/);
    expect(() => retryDelayMs(1, { baseMs: 1, maxMs: -1 })).toThrow(/maxMs/);
  });
});

describe('serializePayload', () => {
  it('says a payload nested too deeply to serialise is nested too deeply', () => {
    let deep: unknown = {};
    for (let i = 0; i < 100_000; i++) deep = { d: deep };
    expect(() => serializePayload(deep)).toThrow(
      /^payload is nested too deeply to be serialised \(Maximum call stack size exceeded\)$/,
    );
  });
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
    cases.push(
      [{ n: runInNewContext('new Number(NaN)') }, /payload\.n is NaN/],
      [{ m: runInNewContext('new Map([[1, 2]])') }, /payload\.m is a Map/],
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
    // A boxed string is written as its ToString, whatever its valueOf says.
    const boxed = Object.assign(new String('ok'), { valueOf: () => 42 });
    cases.push({ boxed }, { n: Object.assign(new Number(NaN), { [Symbol.toPrimitive]: () => 5 }) });
    for (const payload of cases) expect(serializePayload(payload)).toBe(JSON.stringify(payload));
  });
});

describe('describeError', () => {
  it('keeps stacks and describes non-errors', () => {
    expect(describeError(new Error('boom'))).toMatch(/^Error: boom\n\s+at /);
    expect(describeError({ code: 7 })).toBe('non-Error thrown: {"code":7}');
    expect(describeError('x'.repeat(10_000)).length).toBeLessThan(8_010);
  });
  it('describes what a handler may throw without throwing itself', () => {
    expect(describeError(Object.assign(new Error('x'), { stack: 42 }))).toBe('Error: x');
    expect(describeError(Object.assign(new TypeError('y'), { stack: undefined, message: Symbol('s') }))).toBe(
      'TypeError: Symbol(s)',
    );
    const hostile = new Error('z');
    Object.defineProperty(hostile, 'stack', {
      get() {
        throw new Error('no stack for you');
      },
    });
    expect(describeError(hostile)).toBe('Error: z'); // the fields that can be read
    const opaque = new Error('hidden');
    for (const field of ['stack', 'message', 'name'])
      Object.defineProperty(opaque, field, {
        get() {
          throw new Error('no');
        },
      });
    expect(describeError(opaque)).toBe('Error: (its message cannot be read)');
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    expect(describeError(proxy)).toBe('a value that cannot be read was thrown');
    // An Error of another realm fails instanceof, and keeps its message.
    expect(describeError(runInNewContext('new Error("from a vm")'))).toMatch(/^Error: from a vm\n/);
  });
});

describe('Run: what a handler throws', () => {
  const job = { id: '1', task: 't', payload: {}, attempts: 1 } as unknown as JobRow;
  const run = (thrown: unknown) =>
    new Run(job, {
      handler: () => {
        throw thrown;
      },
      timeoutMs: undefined,
      maxAttempts: undefined,
      backoff: undefined,
    }).run();
  it('fails the job, also for a thrown value that cannot be read (a revoked Proxy)', async () => {
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    const outcome = await run(proxy);
    expect(outcome).toMatchObject({ kind: 'failed', permanent: false });
    expect(String((outcome as { error: Error }).error.message)).toContain('the handler threw a value that cannot be read');
    expect(await run(new PermanentFailure('no'))).toMatchObject({ kind: 'failed', permanent: true });
    expect(await run(new Snooze(5))).toMatchObject({ kind: 'snoozed' });
    // A Snooze changed after its constructor checked it is checked again when thrown.
    const moved = new Snooze(new Date(Date.now() + 100));
    moved.runAt!.setTime(-8.64e15);
    expect(await run(moved)).toMatchObject({ kind: 'failed', error: expect.any(ValidationError) });
    expect(await run(Object.create(Snooze.prototype))).toMatchObject({ kind: 'failed', error: expect.any(ValidationError) });
  });
});

describe('Snooze and runAt: times Postgres can store', () => {
  it('refuses delays and dates outside the years 1 to 9999 where they are made', () => {
    expect(() => new Snooze(1e300)).toThrow(ValidationError);
    expect(() => new Snooze(new Date(-8.64e15))).toThrow(/within the years 1 to 9999/);
    expect(() => new Snooze(new Date(NaN))).toThrow(ValidationError);
    expect(new Snooze(runInNewContext('new Date(86400000)') as Date).runAt).toEqual(new Date(86_400_000));
  });
  it('reads a Date through Date.prototype, not through methods it replaced', () => {
    const odd = new Date(Date.UTC(2030, 0, 1));
    odd.toISOString = () => 'not a date';
    expect(toJobValues({ task: 't', runAt: odd }, 1_000).run_at).toBe('2030-01-01T00:00:00.000Z');
    const invalid = new Date(NaN);
    invalid.getTime = () => Date.now();
    expect(() => toJobValues({ task: 't', runAt: invalid }, 1_000)).toThrow(ValidationError);
    expect(() => toJobValues({ task: 't', runAt: Object.create(Date.prototype) as Date }, 1_000)).toThrow(ValidationError);
    expect(toJobValues({ task: 't', runAt: runInNewContext('new Date(0)') as Date }, 1_000).run_at).toBe(
      '1970-01-01T00:00:00.000Z',
    );
  });
});

describe('connection helpers', () => {
  it('never shows the password', () => {
    expect(describeTarget('postgres://me:secret@db.example:6543/app')).toBe('db.example:6543/app');
  });
  it("names PgBouncer's refusals as the pooler's, not as Postgres unreachable (outside review 250)", () => {
    const url = 'postgres://me:secret@127.0.0.1:6432/app';
    expect(connectionError(new Error('no more connections allowed (max_client_conn)'), url).message).toBe(
      'the pooler at 127.0.0.1:6432/app refused the connection: no more connections allowed (max_client_conn) (raise PgBouncer\'s max_client_conn to cover every process\'s connections; see "Behind PgBouncer" in the README)',
    );
    expect(connectionError(new Error('connect ECONNREFUSED 127.0.0.1:6432'), url).message).toBe(
      'cannot reach Postgres at 127.0.0.1:6432/app: connect ECONNREFUSED 127.0.0.1:6432',
    );
  });
  it('recognises connection failures', () => {
    expect(isConnectionFailure(Object.assign(new Error('x'), { code: 'ECONNREFUSED' }))).toBe(true);
    expect(isConnectionFailure(Object.assign(new Error('x'), { code: '57P01' }))).toBe(true);
    expect(isConnectionFailure(Object.assign(new Error('x'), { code: '23505' }))).toBe(false);
    // pg's query_timeout on a pool of the caller's: no reply, as from a silent network (outside review 118).
    expect(isConnectionFailure(new Error('Query read timeout'))).toBe(true);
  });
  it('tells a server that is down from one connection lost', () => {
    const coded = (code: string) => Object.assign(new Error('x'), { code });
    expect(isServerDown(coded('57P03'))).toBe(true); // starting up, recovering, shutting down
    expect(isServerDown(coded('57P02'))).toBe(true); // another session crashed
    expect(isServerDown(coded('ECONNREFUSED'))).toBe(true);
    expect(isServerDown(new Error('wrapped', { cause: coded('57P03') }))).toBe(true);
    expect(isServerDown(coded('57P01'))).toBe(false); // pg_terminate_backend
    expect(isServerDown(new Error('Connection terminated unexpectedly'))).toBe(false);
  });
  it('words a refused login as such, and pg\'s own "no password given" too (outside review 154)', () => {
    const url = 'postgres://u:secret@db:5432/app';
    const coded = (code: string, message: string) => Object.assign(new Error(message), { code });
    expect(loginProblem(coded('28P01', 'password authentication failed for user "u"'), url)).toBe(
      'Postgres at db:5432/app: password authentication failed for user "u" (check the user and password in the database URL)',
    );
    expect(loginProblem(new Error('SASL: SCRAM-SERVER-FIRST-MESSAGE: client password must be a string'), url)).toMatch(
      /\(the server asks for a password: give it in the database URL\)$/,
    );
    const fatal = (code: string, message: string) => Object.assign(coded(code, message), { severity: 'FATAL' });
    expect(loginProblem(fatal('42501', 'permission denied for database "app"'), url)).toMatch(/grant the role CONNECT/);
    // The same words after the login are a missing CREATE on the database (outside review 156).
    expect(
      loginProblem(Object.assign(coded('42501', 'permission denied for database app'), { severity: 'ERROR' }), url),
    ).toBeUndefined();
    expect(loginProblem(coded('42501', 'permission denied for schema sluice'), url)).toBeUndefined();
    expect(loginProblem(coded('ECONNREFUSED', 'connect ECONNREFUSED'), url)).toBeUndefined();
    // PgBouncer says both with 08P01: a refused login, and a passing outage (outside review 176).
    for (const refused of [
      '"trust" authentication failed',
      'password authentication failed',
      'no such user: app',
      'no such database: x',
    ]) {
      expect(loginProblem(coded('08P01', refused), url), refused).toMatch(/the pooler's auth_file/);
    }
    expect(
      loginProblem(coded('08P01', 'server login has been failing, try again later (server_login_retry)'), url),
    ).toBeUndefined();
  });
  it('tells a statement that was never sent from one that may have run', () => {
    const sentNothing = [
      'Client has encountered a connection error and is not queryable', // pg, a caller's dead tx (outside review 150)
      'Client was closed and is not queryable',
      'server login has been failing, try again later (server_login_retry)', // PgBouncer
      'invalid server parameter', // PgBouncer: its SETs before the client's statement failed (outside review 149)
    ];
    for (const message of sentNothing) {
      expect(neverSent(new Error(message)), message).toBe(true);
      expect(neverSent(new Error('wrapped', { cause: new Error(message) })), message).toBe(true);
    }
    expect(neverSent(Object.assign(new Error('x'), { code: 'ECONNREFUSED' }))).toBe(true);
    // postgres.js after its end() (outside review 153); a connection closed under a statement may have run it.
    expect(neverSent(Object.assign(new Error('write CONNECTION_ENDED h:5432'), { code: 'CONNECTION_ENDED' }))).toBe(true);
    expect(neverSent(Object.assign(new Error('write CONNECTION_CLOSED h:5432'), { code: 'CONNECTION_CLOSED' }))).toBe(false);
    for (const message of [
      'Connection terminated unexpectedly',
      'read ECONNRESET',
      'terminating connection due to administrator command',
    ]) {
      expect(neverSent(new Error(message)), message).toBe(false);
    }
  });
  it('quotes schema names', () => {
    expect(quoteSchema('a"b')).toBe('"a""b"');
    expect(() => quoteSchema('')).toThrow(ConfigError);
  });
});

describe('serializePayload: the size limit bounds the work', () => {
  it('refuses a small value that repeats one big part many times without serialising it all', () => {
    const part = Array.from({ length: 100 }, (_, i) => `item ${i} `.repeat(10));
    let tree: unknown = part;
    for (let depth = 0; depth < 8; depth++) tree = Array.from({ length: 10 }, () => tree);
    // 10^8 copies of a 10 kB part: JSON.stringify alone would not finish in minutes.
    expect(() => serializePayload({ tree })).toThrow(/payload is over the limit of 1048576 bytes/);
    expect(() => serializePayload({ tree, when: new Date(0) })).toThrow(/payload is over the limit of 1048576 bytes/);
    // Boxed strings count as the strings JSON writes; empty arrays count too.
    expect(() => serializePayload(Array.from({ length: 100_000 }).fill(new String('q'.repeat(100_000))))).toThrow(
      /over the limit/,
    );
    let doubled: unknown[] = [];
    for (let depth = 0; depth < 60; depth++) doubled = [doubled, doubled];
    expect(() => serializePayload({ doubled })).toThrow(/over the limit/);
  });
  it('accepts a text of exactly the limit, counted in UTF-8 bytes, on both paths', () => {
    for (const extra of [{}, { at: new Date(0) }]) {
      const base = serializePayload({ ...extra, s: '' }).length;
      const exact = { ...extra, s: 'é'.repeat((1_000 - base) / 2), n: undefined };
      expect(Buffer.byteLength(serializePayload(exact, 1_000))).toBe(1_000);
      expect(() => serializePayload({ ...exact, s: `${exact.s}x` }, 1_000)).toThrow(/1001 bytes, over the limit of 1000/);
      const list = Array.from({ length: 499 }, () => 1);
      expect(serializePayload({ ...extra, list }, 2_000)).toBe(JSON.stringify({ ...extra, list }));
    }
  });
});
