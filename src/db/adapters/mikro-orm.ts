import type { Queryable } from '../executor.js';
import { toQuestionMarks } from './placeholders.js';

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
  return {
    async query(text, values) {
      const q = toQuestionMarks(text, values);
      const rows: unknown = await em.execute(q.text, q.values, 'all');
      return { rows: Array.isArray(rows) ? rows : [] };
    },
  };
}
