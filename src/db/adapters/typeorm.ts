import type { Queryable } from '../executor.js';

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
  return {
    async query(text, values) {
      // On Postgres, query() resolves to the rows (of a SELECT, or of an INSERT ... RETURNING).
      const rows: unknown = await manager.query(text, values);
      return { rows: Array.isArray(rows) ? rows : [] };
    },
  };
}
