import type { DriverName } from '../../src/db/driver.js';
import type { Driver } from '../../src/db/driver.js';
import { openDriver } from '../../src/db/drivers/open.js';

/**
 * The driver the worker-level tests run on: SLUICE_TEST_DRIVER=postgres.js runs
 * them on postgres.js (npm test does both, see vitest.config.ts); default pg.
 */
export const TEST_DRIVER: DriverName = process.env.SLUICE_TEST_DRIVER === 'postgres.js' ? 'postgres.js' : 'pg';

/** A driver of the kind under test, for calling worker internals directly. */
export function openTestDriver(url: string): Promise<Driver> {
  return openDriver(TEST_DRIVER, { connectionString: url }, 2, 'sluice-test');
}
