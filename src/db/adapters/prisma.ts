import { globalObjectReason, outsideTransaction, type Queryable } from '../executor.js';

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
  // The client has $disconnect; an interactive transaction's tx has not (Prisma denies it there).
  const global = typeof (prisma as { $disconnect?: unknown }).$disconnect === 'function';
  return outsideTransaction(
    {
      async query(text, values = []) {
        return { rows: await prisma.$queryRawUnsafe<any[]>(text, ...values) };
      },
    },
    global ? globalObjectReason('prismaAdapter', 'the client', 'tx in prisma.$transaction') : undefined,
  );
}
