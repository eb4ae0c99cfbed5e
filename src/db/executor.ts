import { ConfigError } from '../errors.js';
import { cancelStatement } from './cancel-request.js';
import { watchTransactionStatus } from './transaction-status.js';

/**
 * The one interface Sluice needs from a database connection: run a parameterised
 * statement and get rows back. A `pg` Pool, Client or PoolClient satisfies it as
 * is, so a caller's open transaction can be passed straight to `enqueue`.
 */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<{ rows: any[] }>;
}

/** How long the cancel of a statement that a caller's pg client gave up on may take to reach Postgres. */
const GIVEN_UP_CANCEL_MS = 2_000;

/** Runs a statement and returns its rows, typed by the caller. */
export async function rows<T>(db: Queryable, text: string, values?: unknown[]): Promise<T[]> {
  // A ConfigError, before anything is sent: the TypeError it made was wrapped as a
  // DatabaseError, and retry or alerting on database errors took a programming
  // mistake for an outage (outside review 245: listJobs(undefined, ...)).
  if (typeof (db as Partial<Queryable> | null | undefined)?.query !== 'function') {
    throw new ConfigError(
      `db must be a pg Pool or client (anything with query(text, values)), got ${db === null ? 'null' : typeof db}`,
    );
  }
  let result: unknown;
  try {
    result = await db.query(text, values);
  } catch (err) {
    // pg's query_timeout rejects the call and leaves the statement running in the
    // caller's transaction (behind a lock, say). A client put back in its pool then
    // carried it into the next request's transaction, whose COMMIT committed the
    // failed request's job and data (outside review 241). Cancelled, it fails, and
    // that transaction can only roll back. A client without a session key (not pg's)
    // is left alone.
    if (err instanceof Error && /Query read timeout/.test(err.message)) {
      await cancelStatement(db, GIVEN_UP_CANCEL_MS);
    }
    throw err;
  }
  const list = (result as { rows?: unknown } | null | undefined)?.rows;
  // A wrapper of yours that resolves to the rows themselves (or nothing): the
  // statement ran, in your transaction. "(intermediate value) is not iterable",
  // called a failed enqueue, hid that the job commits with it (outside review 202).
  if (!Array.isArray(list)) {
    const got = Array.isArray(result) ? 'an array' : result === null || typeof result !== 'object' ? String(result) : 'an object';
    throw new ConfigError(
      `tx.query() resolved to ${got}, not a result with its rows ({ rows: [...] }, as pg's): the statement ran in ` +
        "your transaction (a write there commits with it); pass a pg client, or your library's transaction through its adapter",
    );
  }
  return list as T[];
}

/**
 * Set by an adapter on what it returns when it was given a library's global object
 * (a Kysely instance, knex, postgres.js's sql, a Drizzle database, TypeORM's
 * DataSource or global manager, the Prisma client): the reason, for a write that
 * must share the caller's transaction to refuse it. Reads through them are fine.
 */
export const OUTSIDE_TRANSACTION = Symbol('sluice.outsideTransaction');

/** The reason an adapter given a library's global object marks it with (see outsideTransaction). */
export function globalObjectReason(adapter: string, given: string, instead: string): string {
  return `${adapter} was given ${given}, which runs outside your transaction: pass the transaction (${instead})`;
}

/**
 * `db`, marked with why it runs outside any transaction (when it does). A function
 * is asked each time a write checks (callerTransaction): for an object whose
 * transaction can end while the adapter is kept (a TypeORM QueryRunner, a
 * MikroORM EntityManager).
 */
export function outsideTransaction(db: Queryable, why: string | undefined | (() => string | undefined)): Queryable {
  if (typeof why === 'function') return Object.defineProperty(db, OUTSIDE_TRANSACTION, { get: why });
  return why === undefined ? db : Object.assign(db, { [OUTSIDE_TRANSACTION]: why });
}

/** A pg Pool (not one of its clients): each query may run on another connection, outside any transaction. */
export function isPgPool(db: object): boolean {
  return 'totalCount' in db && 'idleCount' in db && typeof (db as { connect?: unknown }).connect === 'function';
}

/**
 * The `tx` of a call, checked; for a `write`, which must commit or roll back with
 * the caller's data (an enqueue, a publish, a cancel), never a pool nor an object
 * an adapter marked as outside any transaction: a pg Pool runs each statement on
 * whatever connection is free, and the job committed though the caller rolled
 * back (outside reviews 158, 214).
 */
export function callerTransaction(tx: Queryable, write: boolean): Queryable {
  // Refused, not taken as "no tx": `{ tx: inTx && client }` or `client ?? null` enqueued
  // on the Queue's own pool, outside the caller's transaction (outside review 208).
  if (tx === null || (typeof tx !== 'object' && typeof tx !== 'function')) {
    throw new ConfigError(
      `tx is ${tx === null ? 'null' : typeof tx === 'string' ? 'a string' : String(tx)}: pass the client your transaction runs on, or leave tx out (undefined) to use the Queue's own pool`,
    );
  }
  if (typeof tx.query !== 'function') throw new ConfigError('tx must have a query(text, values) method');
  // TypeORM's query() resolves to the rows, not { rows }: passed as is, the insert
  // ran and the call then failed, the job made all the same (outside review 187).
  if (isTypeOrmObject(tx)) {
    throw new ConfigError(
      "tx is a TypeORM EntityManager, DataSource, Repository or QueryRunner: wrap the transaction's manager in typeormAdapter()",
    );
  }
  const outside = (tx as { [OUTSIDE_TRANSACTION]?: string })[OUTSIDE_TRANSACTION];
  // Outside review 187: through the adapters the global objects committed the job on its own.
  if (write && outside !== undefined) throw new ConfigError(`tx: ${outside}`);
  if (write && isPgPool(tx)) {
    throw new ConfigError(
      'tx is a pg Pool, which runs each statement outside your transaction: pass the client you ran BEGIN on ' +
        '(const client = await pool.connect()), or leave tx out',
    );
  }
  // A pg client that ran no BEGIN cannot be told before the write: after it, see warnIfAutocommitted.
  if (write) watchTransactionStatus(tx);
  return tx;
}

/** A TypeORM EntityManager or DataSource (getRepository), QueryRunner (isTransactionActive) or Repository (its manager). */
export function isTypeOrmObject(db: object): boolean {
  const o = db as { getRepository?: unknown; manager?: { getRepository?: unknown } | null };
  return typeof o.getRepository === 'function' || 'isTransactionActive' in db || typeof o.manager?.getRepository === 'function';
}
