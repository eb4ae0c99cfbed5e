import { CompiledQuery, type Kysely } from 'kysely';
import { outsideTransaction, type Queryable } from '../executor.js';

/**
 * Enqueue inside a Kysely transaction (any Postgres dialect: pg, postgres.js).
 *
 * @example
 *   await db.transaction().execute(async (trx) => {
 *     await trx.insertInto('users').values({ email }).execute();
 *     await queue.enqueue('send_welcome', { email }, { tx: kyselyAdapter(trx) });
 *   });
 */
export function kyselyAdapter(db: Pick<Kysely<any>, 'executeQuery'>): Queryable {
  // The Kysely instance runs each statement on a free connection, outside your transaction.
  const global = (db as { isTransaction?: unknown }).isTransaction === false;
  return outsideTransaction(
    {
      async query(text, values = []) {
        const result = await db.executeQuery(CompiledQuery.raw(text, values));
        return { rows: result.rows as any[] };
      },
    },
    global
      ? 'kyselyAdapter was given a Kysely instance, not a transaction (trx): the instance runs outside your ' +
          'transaction, and a db.connection() that ran BEGIN cannot be told from it; use db.transaction()'
      : undefined,
  );
}
