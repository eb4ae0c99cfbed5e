import { outsideTransaction, type Queryable } from '../executor.js';
import { requireMethod } from './given.js';
import { asText } from './parameters.js';
import { toQuestionMarks } from './placeholders.js';
import { withoutStatement } from './statement-prefix.js';

/** A MikroORM SqlEntityManager (`@mikro-orm/postgresql`), e.g. the one `em.transactional` passes. */
export interface MikroOrmLike {
  execute(text: string, params?: any[], method?: 'all' | 'get' | 'run'): Promise<any>;
}

/**
 * Enqueue inside a MikroORM transaction: pass the EntityManager that
 * `em.transactional()` hands to its callback (or one inside `em.begin()`).
 *
 * @example
 *   await orm.em.transactional(async (em) => {
 *     em.persist(em.create(User, { email }));
 *     await em.flush();
 *     await queue.enqueue('send_welcome', { email }, { tx: mikroOrmAdapter(em) });
 *   });
 */
export function mikroOrmAdapter(em: MikroOrmLike): Queryable {
  requireMethod(em, 'execute', 'mikroOrmAdapter', 'the em of em.transactional() (MikroORM)');
  const m = em as { isInTransaction?: () => boolean };
  return outsideTransaction(
    {
      async query(text, values = []) {
        const q = toQuestionMarks(text, asText(values));
        let rows: unknown;
        try {
          rows = await em.execute(q.text, q.values, 'all');
        } catch (err) {
          // MikroORM prints the statement with its parameters written in (formatQuery).
          const platform = (em as { getPlatform?: () => { formatQuery(sql: string, params: unknown[]): string } }).getPlatform;
          throw withoutStatement(err, () => platform?.call(em).formatQuery(q.text, q.values));
        }
        return { rows: Array.isArray(rows) ? rows : [] };
      },
    },
    // Asked at each write, as execute() resolves its context then: a fork made inside
    // em.transactional(), or an em after its rollback(), ran the insert on its own
    // and the job committed though the transaction rolled back (outside review 212).
    () =>
      typeof m.isInTransaction === 'function' && !m.isInTransaction()
        ? 'mikroOrmAdapter: the EntityManager is in no transaction (a fork, the global em outside em.transactional(), ' +
          'or one whose transaction ended): pass the em em.transactional() hands its callback, or call em.begin() first'
        : undefined,
  );
}
