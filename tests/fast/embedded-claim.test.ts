import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { DataDirInUseError, startEmbeddedPostgres } from '../../src/dev/embedded-postgres.js';

describe('an embedded Postgres data directory', () => {
  it("is refused while a live process owns it, not shut down under it (outside review 251: a second demo killed the first's)", async () => {
    const dir = await mkdtemp(join(tmpdir(), 'sluice-claim-'));
    const dataDir = join(dir, 'pg');
    try {
      // This test's parent is alive and is not this process: another demo, as far as the claim can tell.
      writeFileSync(`${dataDir}.owner`, String(process.ppid));
      const start = startEmbeddedPostgres({ dataDir, persistent: true });
      await expect(start).rejects.toThrow(DataDirInUseError);
      await expect(start).rejects.toThrow(`in use by process ${process.ppid}`);
      // Refused before anything was made or stopped, and the owner's claim is left as it was.
      expect(existsSync(dataDir)).toBe(false);
      expect(readFileSync(`${dataDir}.owner`, 'utf8')).toBe(String(process.ppid));
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
