import { checkConnectionUrls } from '../database-url.js';
import type { Driver, DriverName } from '../driver.js';
import type { PgDriverOptions } from './pg.js';
import type { PostgresJsSql } from './postgres-js.js';

export interface DriverConnection extends Partial<Pick<PgDriverOptions, 'pool'>> {
  connectionString?: string;
  sql?: PostgresJsSql;
  listenConnectionString?: string;
  /** false: no server-side prepared statements (PgBouncer in transaction mode). Default true. */
  prepare?: boolean;
  /** Most time a statement or a connection attempt may take (see time-limit.ts). Default: none. */
  statementTimeoutMs?: number;
}

/**
 * Opens the driver a worker asked for. Each is imported on demand, so a process
 * that uses only one never loads the other library.
 */
export async function openDriver(
  name: DriverName,
  connection: DriverConnection,
  max: number,
  applicationName: string,
): Promise<Driver> {
  checkConnectionUrls(connection);
  if (name === 'postgres.js') {
    const { postgresJsDriver } = await import('./postgres-js.js');
    return postgresJsDriver({ ...connection, max, applicationName });
  }
  const { pgDriver } = await import('./pg.js');
  return pgDriver({ ...connection, max, applicationName });
}

/**
 * A driver that opens on first use, for a constructor that cannot wait (Queue):
 * the driver's library is imported then. A driver never used is never opened,
 * and end() has nothing to close.
 */
export function lazyDriver(open: () => Promise<Driver>): Driver {
  let opening: Promise<Driver> | undefined;
  const driver = () => (opening ??= open());
  return {
    query: async (text, values, name, limitMs) => (await driver()).query(text, values, name, limitMs),
    transaction: async (fn) => (await driver()).transaction(fn),
    listen: async (channel, handlers) => (await driver()).listen(channel, handlers),
    abort(reason) {
      // A driver never opened has nothing in flight; one opening is aborted once open.
      void opening?.then(
        (opened) => opened.abort(reason),
        () => {},
      );
    },
    async end() {
      const opened = await opening?.catch(() => undefined);
      await opened?.end();
    },
  };
}
