import { ConfigError } from '../../errors.js';
import { globalObjectReason, outsideTransaction, type Queryable } from '../executor.js';
import { requireMethod } from './given.js';
import { toQuestionMarks } from './placeholders.js';
import { withoutStatement } from './statement-prefix.js';

/** A Knex raw statement, as it reads back the SQL it sends. */
interface NativeSql {
  toSQL(): { toNative(): { sql: string } };
}

/** A Knex instance or transaction (`trx`) on the pg client. */
export interface KnexLike {
  raw(text: string, bindings: readonly any[]): PromiseLike<unknown>;
}

/**
 * Enqueue inside a Knex transaction.
 *
 * @example
 *   await knex.transaction(async (trx) => {
 *     await trx('users').insert({ email });
 *     await queue.enqueue('send_welcome', { email }, { tx: knexAdapter(trx) });
 *   });
 */
export function knexAdapter(knex: KnexLike): Queryable {
  // The knex instance (not a trx: isTransaction unset) runs outside your transaction.
  // A query builder (knex('users')) has no raw(): found at the first statement, it was a DatabaseError.
  requireMethod(
    knex,
    'raw',
    'knexAdapter',
    "the trx of knex.transaction(), not a query builder nor another library's transaction",
  );
  const k = knex as KnexLike & { isTransaction?: unknown; transaction?: unknown; isCompleted?: () => boolean };
  const global = k.isTransaction !== true && typeof k.transaction === 'function';
  // A trx kept past its commit or rollback failed as a DatabaseError, though nothing
  // was sent (outside review 212); asked at each write, and at each statement, so
  // that reads (getJob, lockKeys before outside review 256) are refused alike.
  const ended = () =>
    !global && typeof k.isCompleted === 'function' && k.isCompleted()
      ? 'knexAdapter: the transaction (trx) has ended (committed or rolled back): call Sluice inside knex.transaction()'
      : undefined;
  return outsideTransaction(
    {
      async query(text, values) {
        const why = ended();
        if (why !== undefined) throw new ConfigError(`tx: ${why}`);
        const q = toQuestionMarks(text, values);
        try {
          const result = (await knex.raw(q.text, q.values)) as { rows: any[] };
          return { rows: result.rows };
        } catch (err) {
          // Knex prints the statement as it sent it (its $n placeholders).
          throw withoutStatement(err, () => (knex.raw(q.text, q.values) as unknown as NativeSql).toSQL().toNative().sql);
        }
      },
    },
    global ? globalObjectReason('knexAdapter', 'the knex instance', 'trx') : ended,
  );
}
