import type { Driver, DriverName } from '../driver.js';
import type { PgDriverOptions } from './pg.js';
import type { PostgresJsSql } from './postgres-js.js';

export interface DriverConnection extends Partial<Pick<PgDriverOptions, 'pool'>> {
  connectionString?: string;
  sql?: PostgresJsSql;
  listenConnectionString?: string;
  /** false: no server-side prepared statements (PgBouncer in transaction mode). Default true. */
  prepare?: boolean;
}

/**
 * Opens the driver a worker asked for. Each is imported on demand, so a process
 * that uses only one never loads the other library.
 */
export async function openDriver(name: DriverName, connection: DriverConnection, max: number, applicationName: string): Promise<Driver> {
  if (name === 'postgres.js') {
    const { postgresJsDriver } = await import('./postgres-js.js');
    return postgresJsDriver({ ...connection, max, applicationName });
  }
  const { pgDriver } = await import('./pg.js');
  return pgDriver({ ...connection, max, applicationName });
}
