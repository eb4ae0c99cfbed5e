import type { DriverConnectionOptions } from '../connection.js';
import { checkConnectionUrls } from '../database-url.js';
import type { Driver, DriverName } from '../driver.js';
import { lazyDriver, openDriver } from './open.js';
import { pgDriver } from './pg.js';

/** Connections the Queue's own pool opens at most. */
const POOL_SIZE = 10;

/**
 * The Queue's driver. The constructor cannot wait, so postgres.js (an optional
 * package, imported on demand) opens on the first call; pg opens at once, so
 * that `queue.pool` is there from the start.
 */
export function openQueueDriver(
  name: DriverName,
  options: DriverConnectionOptions & { listenConnectionString?: string },
  statementTimeoutMs: number,
): Driver {
  const { connectionString, pool, sql, listenConnectionString } = options;
  const connection = { connectionString, pool, sql, listenConnectionString, statementTimeoutMs };
  checkConnectionUrls(connection);
  if (name === 'pg') return pgDriver({ ...connection, max: POOL_SIZE, applicationName: 'sluice-queue' });
  return lazyDriver(() => openDriver(name, connection, POOL_SIZE, 'sluice-queue'));
}
