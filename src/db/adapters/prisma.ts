import { ConfigError } from '../../errors.js';
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
        try {
          return { rows: await prisma.$queryRawUnsafe<any[]>(text, ...values) };
        } catch (err) {
          throw closedTransaction(err) ?? err;
        }
      },
    },
    global ? globalObjectReason('prismaAdapter', 'the client', 'tx in prisma.$transaction') : undefined,
  );
}

/**
 * Prisma's refusal of an interactive transaction's tx used after it committed,
 * rolled back or timed out (P2028, "Transaction already closed"), made before
 * anything is sent: a ConfigError, as for Kysely and Knex, not the DatabaseError
 * of a statement Postgres refused (outside review 212's list). Its message is the
 * invocation's, whose last line says which end it was.
 */
function closedTransaction(err: unknown): ConfigError | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  const message = err instanceof Error ? err.message : '';
  const closed = /Transaction already closed: (.*)$/.exec(message);
  if (code !== 'P2028' || !closed) return undefined;
  return new ConfigError(
    `tx: prismaAdapter: the transaction (tx) has ended: ${closed[1]}; enqueue inside prisma.$transaction(async (tx) => ...)`,
    { cause: err },
  );
}
