/**
 * The node-postgres conversions Sluice makes itself on its own pools
 * (src/db/drivers/pg-encoding.ts): timestamptz text → Date without pg's regular
 * expression, and array parameters written as one join. Both must give exactly
 * what pg's own would, for what real Postgres writes and reads.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pgDriver, type PgDriver } from '../src/db/drivers/pg.js';
import { arrayLiteral, encodeArrays, parseTimestamptz } from '../src/db/drivers/pg-encoding.js';
import { databaseUrl } from './helpers/database.js';

const pgTimestamptz = pg.types.getTypeParser(1184, 'text');
let client: pg.Client;

beforeAll(async () => {
  // Every column as the text Postgres sent.
  client = new pg.Client({ connectionString: databaseUrl(), types: { getTypeParser: () => (text: string) => text } });
  await client.connect();
});
afterAll(async () => {
  await client.end();
});

describe('parseTimestamptz', () => {
  it.each(['UTC', 'Asia/Kolkata', 'America/St_Johns', 'Africa/Monrovia', 'Pacific/Chatham', 'America/Los_Angeles'])(
    'gives the Date pg gives for what Postgres writes in TimeZone %s, without pg for ISO times',
    async (zone) => {
      await client.query(`SET TimeZone = '${zone}'`);
      const { rows } = await client.query<{ v: string }>(
        `SELECT t::text AS v FROM (
           SELECT timestamptz '1850-01-01 UTC' + random() * interval '250 years' AS t FROM generate_series(1, 2000)
           UNION ALL SELECT unnest(ARRAY[now(), date_trunc('second', now()), '2020-01-01 00:00:00.009+00',
             '2020-01-01 00:00:00.29+00', '9999-12-30 23:59:59.999999+00', '0150-06-01 01:02:03.5+00']::timestamptz[])
         ) x`,
      );
      let fallbacks = 0;
      for (const { v } of rows) {
        const ours = parseTimestamptz(v, (text) => {
          fallbacks++;
          return pgTimestamptz(text);
        });
        expect(ours, v).toBeInstanceOf(Date);
        expect((ours as Date).getTime(), v).toBe((pgTimestamptz(v) as Date).getTime());
      }
      expect(fallbacks).toBe(0);
    },
  );

  it('hands what it does not parse to the fallback: infinity, BC, years before 100, other DateStyles', async () => {
    await client.query(`SET TimeZone = 'UTC'`);
    const { rows } = await client.query<{ v: string }>(
      `SELECT unnest(ARRAY['infinity', '-infinity', '0044-03-15 12:00 BC', '0099-01-01', '9999-12-31 23:59:59.999999-01']::timestamptz[])::text AS v`,
    );
    await client.query(`SET DateStyle = 'SQL, DMY'`);
    const sql = await client.query<{ v: string }>(`SELECT now()::text AS v`);
    await client.query(`RESET DateStyle`);
    for (const { v } of [...rows, ...sql.rows]) {
      const seen: string[] = [];
      const fallback = (text: string) => {
        seen.push(text);
        return pgTimestamptz(text);
      };
      expect(parseTimestamptz(v, fallback), v).toEqual(pgTimestamptz(v));
      expect(seen).toEqual([v]);
    }
  });
});

describe('arrayLiteral', () => {
  it.each([
    ['bigint[]', ['1', '9007199254740993', '-42']],
    ['int[]', [1, 2, -3, 0]],
    ['text[]', ['1', null, '22']],
    ['boolean[]', [true, false, null]],
    ['jsonb[]', [null, null]],
    ['int[]', []],
  ])('reads back in Postgres as pg would write it (%s %j)', async (type, values) => {
    const literal = arrayLiteral(values);
    expect(literal).toBeDefined();
    const { rows } = await client.query<{ ours: string; theirs: string }>(
      `SELECT $1::${type}::text AS ours, $2::${type}::text AS theirs`,
      [literal, values],
    );
    expect(rows[0]!.ours).toBe(rows[0]!.theirs);
  });

  it('leaves to pg every array that would need quotes or is not integers', () => {
    for (const values of [['a'], [''], [' 1'], ['1,2'], ['NULL'], ['1e3'], [1.5], [Number.MAX_SAFE_INTEGER + 2], [{}], [[1]]]) {
      expect(arrayLiteral(values), JSON.stringify(values)).toBeUndefined();
    }
    const values = [['1', '2'], 'x', ['a']];
    const encoded = encodeArrays(values)!;
    expect(encoded).toEqual(['{1,2}', 'x', ['a']]);
    expect(values[0]).toEqual(['1', '2']);
    const untouched = ['x', 1];
    expect(encodeArrays(untouched)).toBe(untouched);
  });
});

describe('the pg driver on a pool it made', () => {
  let driver: PgDriver;
  beforeAll(() => {
    driver = pgDriver({ connectionString: databaseUrl(), max: 1, applicationName: 'sluice-test-pg-encoding' });
  });
  afterAll(async () => {
    await driver.end();
  });

  it('returns timestamptz as Date and takes array parameters, named or not', async () => {
    for (const name of [undefined, 'sluice-test-pg-encoding']) {
      const { rows } = await driver.query(
        `SELECT timestamptz '2026-12-01 10:58:05.123456+05:30' AS t, $1::bigint[]::text AS ids, $2::text[] AS texts`,
        [
          ['7', '8'],
          ['a"b', null],
        ],
        name,
      );
      expect(rows[0].t).toEqual(new Date('2026-12-01T05:28:05.123Z'));
      expect(rows[0].ids).toBe('{7,8}');
      expect(rows[0].texts).toEqual(['a"b', null]);
    }
  });
});

describe('the pg driver with a statement limit', () => {
  let driver: PgDriver;
  beforeAll(() => {
    driver = pgDriver({
      connectionString: databaseUrl(),
      max: 1,
      applicationName: 'sluice-test-pg-reuse',
      statementTimeoutMs: 10_000,
    });
  });
  afterAll(async () => {
    await driver.end();
  });

  it('keeps a connection whose statement Postgres refused, and drops one the server ended', async () => {
    const pid = async () => (await driver.query('SELECT pg_backend_pid() AS pid', [])).rows[0].pid as number;
    const first = await pid();
    // An error of the statement (here a trigger-like RAISE, then a division by zero):
    // the session is fine, and is used again (outside review 42: a refused result
    // tried every 250 ms opened a new connection each time).
    await expect(driver.query(`DO $$ BEGIN RAISE EXCEPTION 'refused'; END $$`, [])).rejects.toThrow('refused');
    await expect(driver.query('SELECT 1 / $1::int', [0])).rejects.toThrow('division by zero');
    expect(await pid()).toBe(first);
    // The server ending the session (57P01, SQLSTATE class of shutdowns): a new connection.
    await expect(driver.query('SELECT pg_terminate_backend(pg_backend_pid())', [])).rejects.toThrow();
    expect(await pid()).not.toBe(first);
  });
});
