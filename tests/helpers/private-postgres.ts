import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../../src/dev/embedded-postgres.js';

/**
 * A Postgres of the test's own (own data directory and port), for tests that
 * restart the server or change its settings. The shared server is never touched.
 */
export async function startPrivatePostgres(prefix: string): Promise<EmbeddedPostgres> {
  const dataDir = await mkdtemp(join(tmpdir(), `sluice-${prefix}-pg-`));
  return startEmbeddedPostgres({
    dataDir,
    persistent: false,
    settings: { fsync: 'off', synchronous_commit: 'off', full_page_writes: 'off' },
  });
}
