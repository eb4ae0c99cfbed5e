import { sql, type SQL } from 'drizzle-orm';
import { globalObjectReason, outsideTransaction, type Queryable } from '../executor.js';
import { requireMethod } from './given.js';
import { asText } from './parameters.js';
import { endedTransaction } from './postgres-js.js';

/** A Drizzle database or transaction, on node-postgres or postgres.js. */
export interface DrizzleLike {
  execute(query: SQL): PromiseLike<unknown>;
}

/** Sluice's `$n` text as a Drizzle SQL object, each value bound as one parameter. */
function toSql(text: string, values: readonly unknown[]): SQL {
  const chunks: SQL[] = [];
  let last = 0;
  for (const match of text.matchAll(/\$(\d+)/g)) {
    chunks.push(sql.raw(text.slice(last, match.index)));
    // sql.param, not ${value}: Drizzle would spread an array into a list.
    chunks.push(sql`${sql.param(values[Number(match[1]) - 1])}`);
    last = match.index + match[0].length;
  }
  chunks.push(sql.raw(text.slice(last)));
  return sql.join(chunks);
}

/**
 * Enqueue inside a Drizzle transaction (drivers node-postgres and postgres-js).
 *
 * @example
 *   await db.transaction(async (tx) => {
 *     await tx.insert(users).values({ email });
 *     await queue.enqueue('send_welcome', { email }, { tx: drizzleAdapter(tx) });
 *   });
 */
export function drizzleAdapter(db: DrizzleLike): Queryable {
  requireMethod(db, 'execute', 'drizzleAdapter', 'the tx of db.transaction() (Drizzle)');
  // Drizzle's transactions (PgTransaction) have rollback(); the database object has not.
  const global = typeof (db as { rollback?: unknown }).rollback !== 'function';
  return outsideTransaction(
    {
      async query(text, values = []) {
        let result: unknown;
        try {
          result = await db.execute(toSql(text, asText(values)));
        } catch (err) {
          // Drizzle wraps the driver's error (its message the whole statement) and keeps
          // it as `cause`: without its code, a connection killed mid-enqueue was told as
          // a DatabaseError, not a ConnectionError (outside review 187).
          const cause = (err as { cause?: unknown } | null)?.cause;
          throw (
            endedTransaction(cause, 'drizzleAdapter', 'db.transaction()') ??
            (typeof (cause as { code?: unknown } | null)?.code === 'string' ? cause : err)
          );
        }
        // node-postgres returns a QueryResult, postgres.js an array of rows.
        return { rows: Array.isArray(result) ? [...result] : (result as { rows: any[] }).rows };
      },
    },
    global ? globalObjectReason('drizzleAdapter', 'the database', 'tx in db.transaction') : undefined,
  );
}
