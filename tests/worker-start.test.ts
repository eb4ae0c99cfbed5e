/** What Worker.start() says when it cannot work: once, clearly, with what to do. */
import { describe, expect, it } from 'vitest';
import { MigrationError, Worker, type SluiceError } from '../src/index.js';
import { databaseUrl, waitFor } from './helpers/database.js';
import { TEST_DRIVER } from './helpers/driver.js';

describe('Worker.start()', () => {
  it('rejects with the migrate hint when the schema was never migrated', async () => {
    const worker = new Worker({
      connectionString: databaseUrl(),
      schema: 'never_migrated_here',
      driver: TEST_DRIVER,
      tasks: { t: async () => {} },
    });
    const started = worker.start();
    await expect(started).rejects.toBeInstanceOf(MigrationError);
    await expect(started).rejects.toThrow(/no Sluice tables in schema "never_migrated_here": run `sluice migrate`/);
    await worker.stop();
  });

  it('starts while Postgres is out of reach and reports where it tried, without the password', async () => {
    const errors: SluiceError[] = [];
    const worker = new Worker({
      connectionString: 'postgres://someone:s3cret@127.0.0.1:1/nowhere',
      driver: TEST_DRIVER,
      tasks: { t: async () => {} },
    });
    worker.on('error', (e) => errors.push(e));
    try {
      await worker.start();
      await waitFor(() => errors.find((e) => e.code === 'CONNECTION'), 'a connection error event');
      const first = errors.find((e) => e.code === 'CONNECTION')!;
      expect(first.message).toMatch(/cannot reach Postgres at 127\.0\.0\.1:1\/nowhere/);
      expect(errors.map((e) => e.message).join('\n')).not.toContain('s3cret');
    } finally {
      await worker.stop();
    }
  });
});
