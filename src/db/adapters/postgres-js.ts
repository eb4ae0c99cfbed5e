import { ConfigError } from '../../errors.js';
import { globalObjectReason, outsideTransaction, type Queryable } from '../executor.js';
import { requireMethod } from './given.js';
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
  requireMethod(sql, 'unsafe', 'postgresJsAdapter', 'the tx of sql.begin() (postgres.js)');
  // A transaction's tx has savepoint() and a reserved connection release(); the
  // global sql has neither (postgres.js 3 and 4).
  const s = sql as { savepoint?: unknown; release?: unknown };
  const global = typeof s.savepoint !== 'function' && typeof s.release !== 'function';
  return outsideTransaction(
    {
      async query(text, values = []) {
        try {
          return { rows: [...(await sql.unsafe(text, params(sql, values)))] };
        } catch (err) {
          throw endedTransaction(err, 'postgresJsAdapter', 'sql.begin()') ?? err;
        }
      },
    },
    global ? globalObjectReason('postgresJsAdapter', 'sql', 'tx in sql.begin') : undefined,
  );
}

/**
 * Array parameters typed 0, so that the server takes their type from the
 * statement's cast, as Sluice's own postgres.js driver sends them: postgres.js
 * typed an array of Buffers as one bytea, and 4.2 quoted an array literal sent as
 * text (outside reviews 212, 214). A `sql` without `typed()` gets the literal.
 */
function params(sql: PostgresJsLike, values: readonly unknown[]): any[] {
  const typed = (sql as { typed?: (value: unknown, type: number) => unknown }).typed;
  if (typeof typed !== 'function') return asText(values);
  return values.map((v) => (Array.isArray(v) ? typed.call(sql, v, 0) : v));
}

/**
 * postgres.js 4's refusal of a transaction's tx used after it committed or rolled
 * back (UNSAFE_TRANSACTION, "The transaction has ended"), made before anything is
 * sent: a ConfigError naming the adapter, as for Kysely, Knex and Prisma, not a
 * DatabaseError (outside review 229). postgres.js 3 runs such a statement on its own.
 */
export function endedTransaction(
  err: unknown,
  adapter: 'postgresJsAdapter' | 'drizzleAdapter',
  inside: 'sql.begin()' | 'db.transaction()',
): ConfigError | undefined {
  const e = err as { code?: unknown; message?: unknown } | null;
  if (e?.code !== 'UNSAFE_TRANSACTION' || typeof e.message !== 'string' || !/transaction has ended/i.test(e.message)) {
    return undefined;
  }
  return new ConfigError(
    `tx: ${adapter}: the transaction (tx) has ended (committed or rolled back): call Sluice inside ${inside}`,
    {
      cause: err,
    },
  );
}
