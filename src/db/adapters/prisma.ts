import type { Queryable } from '../executor.js';

/** A Prisma client or interactive-transaction client (`tx` in `$transaction(async (tx) => ...)`). */
export interface PrismaLike {
  $queryRawUnsafe<T = unknown>(query: string, ...values: any[]): Promise<T>;
}

/**
 * Enqueue inside a Prisma interactive transaction.
 *
 * @example
 *   await prisma.$transaction(async (tx) => {
 *     await tx.user.create({ data: { email } });
 *     await queue.enqueue('send_welcome', { email }, { tx: prismaAdapter(tx) });
 *   });
 */
export function prismaAdapter(prisma: PrismaLike): Queryable {
  return {
    async query(text, values = []) {
      return { rows: await prisma.$queryRawUnsafe<any[]>(text, ...values) };
    },
  };
}
