import { isPoolerStatementClash } from '../../errors.js';

/** One statement sent by a driver: named (a prepared statement) or not. */
type Send<R> = (text: string, values: unknown[] | undefined, name: string | undefined, limitMs: number | undefined) => Promise<R>;

/**
 * `send`, sending every statement unnamed once a named one met a pooler that does
 * not keep prepared statements (42P05 / 26000 on a "sluice-" statement: PgBouncer
 * in transaction mode before 1.21, or without max_prepared_statements). pg
 * remembers per connection what it prepared, and through such a pooler each later
 * use of the name landed on a server connection without it: every claim and result
 * write failed from then on, while the heartbeats kept the stuck jobs locked
 * (outside review 166: two workers stopped for good within 3 s). The statement that
 * clashed goes again unnamed: Parse (42P05) or Bind (26000) failed, so it did not
 * run. Said once, as a process warning.
 */
export function withUnnamedFallback<R>(
  send: Send<R>,
): (text: string, values?: unknown[], name?: string, limitMs?: number) => Promise<R> {
  let unnamed = false;
  return async (text, values, name, limitMs) => {
    try {
      return await send(text, values, unnamed ? undefined : name, limitMs);
    } catch (err) {
      // Statements in flight beside the first clash may clash too: each goes again.
      if (!name || !isPoolerStatementClash(err)) throw err;
      if (!unnamed) {
        unnamed = true;
        process.emitWarning(
          'Sluice: a prepared statement clashed on a connection pooler in transaction mode ' +
            `(${(err as Error).message}); sending every statement unnamed from now on. ` +
            'Set preparedStatements: false (CLI: --no-prepared-statements) for such a pooler.',
          { code: 'SLUICE_PREPARED_STATEMENTS' },
        );
      }
      return send(text, values, undefined, limitMs);
    }
  };
}
