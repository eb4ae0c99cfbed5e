import { globalObjectReason, outsideTransaction, type Queryable } from '../executor.js';
import { asText } from './parameters.js';

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
  // A transaction's tx has savepoint() and a reserved connection release(); the
  // global sql has neither (postgres.js 3 and 4).
  const s = sql as { savepoint?: unknown; release?: unknown };
  const global = typeof s.savepoint !== 'function' && typeof s.release !== 'function';
  return outsideTransaction(
    {
      async query(text, values = []) {
        return { rows: [...(await sql.unsafe(text, asText(values) as any[]))] };
      },
    },
    global ? globalObjectReason('postgresJsAdapter', 'sql', 'tx in sql.begin') : undefined,
  );
}
