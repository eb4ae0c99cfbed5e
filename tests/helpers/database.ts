import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { inject } from 'vitest';
import { migrate } from '../../src/migrate.js';
import { quoteSchema } from '../../src/db/identifiers.js';

export interface TestDatabase {
  url: string;
  schema: string;
  /** The schema, quoted for SQL text. */
  s: string;
  pool: pg.Pool;
  drop(): Promise<void>;
}

export function databaseUrl(): string {
  return inject('databaseUrl');
}

/**
 * A fresh, migrated schema for one test file (or one test), so files running in
 * parallel never see each other's jobs or notifications.
 */
export async function createTestSchema(prefix: string): Promise<TestDatabase> {
  const url = databaseUrl();
  const schema = `t_${prefix}_${randomBytes(4).toString('hex')}`;
  await migrate({ connectionString: url, schema });
  const pool = new pg.Pool({ connectionString: url, max: 10 });
  pool.on('error', () => {});
  const s = quoteSchema(schema);
  return {
    url,
    schema,
    s,
    pool,
    async drop() {
      await pool.query(`DROP SCHEMA IF EXISTS ${s} CASCADE`);
      await pool.end();
    },
  };
}

/** Polls `check` until it returns a truthy value; fails after `timeoutMs`. No fixed sleeps. */
export async function waitFor<T>(check: () => Promise<T> | T, what: string, timeoutMs = 20_000): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await check();
      if (value) return value as NonNullable<T>;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}${last ? `: ${(last as Error).message}` : ''}`);
    }
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** Counts jobs by status in a schema. */
export async function statusCounts(db: TestDatabase): Promise<Record<string, number>> {
  const { rows } = await db.pool.query<{ status: string; n: number }>(
    `SELECT status, count(*)::int AS n FROM ${db.s}.jobs GROUP BY status`,
  );
  return Object.fromEntries(rows.map((r) => [r.status, r.n]));
}

/** Resolves with the next event of that name. */
export function nextEvent<T extends unknown[]>(
  emitter: { once(e: string, l: (...a: T) => void): unknown },
  event: string,
): Promise<T> {
  return new Promise((resolve) => emitter.once(event, (...args: T) => resolve(args)));
}
