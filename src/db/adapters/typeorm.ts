import { outsideTransaction, type Queryable } from '../executor.js';
import { requireMethod } from './given.js';

/** A TypeORM EntityManager (e.g. the one `dataSource.transaction` passes) or QueryRunner. */
export interface TypeOrmLike {
  query(text: string, parameters?: any[]): Promise<any>;
}

/**
 * Enqueue inside a TypeORM transaction: pass the transaction's EntityManager,
 * or a QueryRunner after `startTransaction()`. Not `dataSource.manager`, which
 * takes a fresh connection per statement and so is outside your transaction.
 *
 * @example
 *   await dataSource.transaction(async (manager) => {
 *     await manager.insert(User, { email });
 *     await queue.enqueue('send_welcome', { email }, { tx: typeormAdapter(manager) });
 *   });
 */
export function typeormAdapter(manager: TypeOrmLike): Queryable {
  requireMethod(manager, 'query', 'typeormAdapter', 'the EntityManager of dataSource.transaction() or a QueryRunner (TypeORM)');
  // Asked at each write, not only now: a QueryRunner adapted inside its transaction
  // and used after rollbackTransaction() committed the job on its own (outside review 212).
  const why = () => {
    const reason = whyOutside(manager);
    return reason && `typeormAdapter: ${reason}`;
  };
  return outsideTransaction(
    {
      async query(text, values) {
        let rows: unknown;
        try {
          // On Postgres, query() resolves to the rows (of a SELECT, or of an INSERT ... RETURNING).
          rows = await manager.query(text, values);
        } catch (err) {
          // The driver's own error: TypeORM's QueryFailedError carries the statement and its
          // parameters, the job's payload among them, into every log line (outside review 231).
          const driverError = (err as { driverError?: unknown } | null)?.driverError;
          throw driverError instanceof Error ? driverError : err;
        }
        return { rows: Array.isArray(rows) ? rows : [] };
      },
    },
    why,
  );
}

/**
 * Why `manager` runs outside any transaction, or undefined: a QueryRunner before
 * startTransaction(), the DataSource, or its global manager (no queryRunner), each
 * of which ran the job's insert on its own and committed it though the transaction
 * rolled back (outside review 187).
 */
function whyOutside(manager: TypeOrmLike): string | undefined {
  const m = manager as {
    isTransactionActive?: unknown;
    queryRunner?: { isTransactionActive?: unknown } | null;
    manager?: TypeOrmLike & { getRepository?: unknown };
    getRepository?: unknown;
  };
  if ('isTransactionActive' in m) {
    return m.isTransactionActive === true ? undefined : 'the QueryRunner has no transaction: call startTransaction() first';
  }
  // A Repository runs on its manager (outside review 190: one of the global manager's slipped through).
  if (typeof m.getRepository !== 'function' && typeof m.manager?.getRepository === 'function') return whyOutside(m.manager);
  if (m.manager !== undefined && typeof m.getRepository === 'function')
    return "pass the transaction's EntityManager, not the DataSource, which runs outside it";
  if (typeof m.getRepository === 'function' && !m.queryRunner)
    return "pass the transaction's EntityManager (dataSource.transaction(async (manager) => ...)), not dataSource.manager, which runs outside it";
  if (typeof m.getRepository === 'function' && m.queryRunner?.isTransactionActive !== true)
    return (
      "the EntityManager's QueryRunner has no transaction: a manager kept past its dataSource.transaction() " +
      'callback (call Sluice inside it), or a QueryRunner whose startTransaction() was not called or whose ' +
      'transaction ended (outside review 229)'
    );
  return undefined;
}
