import { ConfigError } from '../../errors.js';
import { globalObjectReason, outsideTransaction, type Queryable } from '../executor.js';
import { requireMethod } from './given.js';

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
  requireMethod(prisma, '$queryRawUnsafe', 'prismaAdapter', 'the tx of prisma.$transaction() (Prisma)');
  // The client has $disconnect; an interactive transaction's tx has not (Prisma denies it there).
  const global = typeof (prisma as { $disconnect?: unknown }).$disconnect === 'function';
  return outsideTransaction(
    {
      async query(text, values = []) {
        try {
          return { rows: await prisma.$queryRawUnsafe<any[]>(text, ...values) };
        } catch (err) {
          throw closedTransaction(err) ?? postgresError(err) ?? err;
        }
      },
    },
    global ? globalObjectReason('prismaAdapter', 'the client', 'tx in prisma.$transaction') : undefined,
  );
}

/**
 * Prisma's refusal of an interactive transaction's tx used after it committed,
 * rolled back or timed out (P2028: "Transaction already closed", "... on an
 * expired transaction"), made before anything is sent: a ConfigError, as for
 * Kysely and Knex, not the DatabaseError of a statement Postgres refused (outside
 * reviews 212 and 229). Its message is the invocation's, whose last line says which end it was.
 */
function closedTransaction(err: unknown): ConfigError | undefined {
  if ((err as { code?: unknown } | null)?.code !== 'P2028' || !(err instanceof Error)) return undefined;
  const why = err.message
    .trim()
    .split('\n')
    .at(-1)!
    .replace(/^Transaction API error: (Transaction already closed: )?/, '');
  return new ConfigError(
    `tx: prismaAdapter: the transaction (tx) has ended: ${why}; call Sluice inside prisma.$transaction(async (tx) => ...)`,
    { cause: err },
  );
}

/** What Prisma's driver adapter says Postgres answered (P2010, a raw query that failed). */
interface DriverAdapterCause {
  originalCode?: unknown;
  originalMessage?: unknown;
  constraint?: { index?: unknown };
}

/**
 * Postgres's own error, out of Prisma's wrapping of it (P2010 "Raw query failed",
 * its SQLSTATE and message kept in meta): with it, a held job key is a
 * DuplicateJobError and a DatabaseError carries the SQLSTATE, as through every
 * other adapter (outside review 229: sqlState was P2010, and a duplicate key a
 * DatabaseError). Prisma keeps no DETAIL; the holder's id is in the message.
 */
function postgresError(err: unknown): Error | undefined {
  const meta = (err as { meta?: { driverAdapterError?: { cause?: DriverAdapterCause } } } | null)?.meta;
  const cause = meta?.driverAdapterError?.cause;
  if (typeof cause?.originalCode !== 'string') return undefined;
  const message = typeof cause.originalMessage === 'string' ? cause.originalMessage : (err as Error).message;
  const constraint = typeof cause.constraint?.index === 'string' ? cause.constraint.index : undefined;
  return Object.assign(new Error(message, { cause: err }), { code: cause.originalCode, constraint });
}
