import { CompiledQuery, type Kysely } from 'kysely';
import { ConfigError } from '../../errors.js';
import { outsideTransaction, type Queryable } from '../executor.js';
import { requireMethod } from './given.js';

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
  requireMethod(db, 'executeQuery', 'kyselyAdapter', 'the trx of db.transaction() (Kysely)');
  // The Kysely instance runs each statement on a free connection, outside your transaction.
  const global = (db as { isTransaction?: unknown }).isTransaction === false;
  return outsideTransaction(
    {
      async query(text, values = []) {
        try {
          const result = await db.executeQuery(CompiledQuery.raw(text, values));
          return { rows: result.rows as any[] };
        } catch (err) {
          throw endedTransaction(err) ?? err;
        }
      },
    },
    global
      ? 'kyselyAdapter was given a Kysely instance or db.connection(), not a transaction (trx): the instance runs ' +
          'outside your transaction, and a connection that ran BEGIN cannot be told from it; use db.transaction()'
      : undefined,
  );
}

/**
 * Kysely's refusal of a transaction (trx) used after it committed or rolled back,
 * made before anything is sent: a ConfigError, not the DatabaseError a statement
 * Postgres refused becomes (outside review 212). Kysely keeps the state private,
 * so its message is what tells.
 */
function endedTransaction(err: unknown): ConfigError | undefined {
  const message = err instanceof Error && !('code' in err) ? err.message : '';
  if (!/^Transaction is already (committed|rolled back)$/.test(message)) return undefined;
  return new ConfigError(
    `tx: kyselyAdapter: ${message.toLowerCase().replace('transaction', 'the transaction (trx)')}: call Sluice inside db.transaction().execute()`,
    { cause: err },
  );
}
