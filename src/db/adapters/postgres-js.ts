import type { Queryable } from '../executor.js';

/** The part of postgres.js's `sql` (or a transaction's `tx`) Sluice uses. */
export interface PostgresJsLike {
  unsafe(text: string, values?: any[]): PromiseLike<readonly any[]>;
}

/**
 * Enqueue inside a postgres.js transaction.
 *
 * @example
 *   await sql.begin(async (tx) => {
 *     await tx.unsafe('insert into users (email) values ($1)', [email]);
 *     await queue.enqueue('send_welcome', { email }, { tx: postgresJsAdapter(tx) });
 *   });
 */
export function postgresJsAdapter(sql: PostgresJsLike): Queryable {
  return {
    async query(text, values = []) {
      return { rows: [...(await sql.unsafe(text, values as any[]))] };
    },
  };
}
