import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';

/** Settings every project shares. */
const shared = {
  // Need the Debian package pgbouncer: `npm run test:pgbouncer` (vitest.pgbouncer.config.ts).
  exclude: ['tests/pgbouncer/**', 'node_modules/**'],
  globalSetup: ['tests/helpers/global-setup.ts'],
  pool: 'forks' as const,
  // Each file works in its own schema, so files run in parallel safely.
  fileParallelism: true,
  testTimeout: 60_000,
  hookTimeout: 60_000,
};

export default defineConfig({
  test: {
    // Files mostly wait (on Postgres, timers, worker processes): on 2 cores vitest's
    // default of one file at a time took 11.4 min of 3.7 min of CPU; three at a time 4.5 min.
    // The suite grew: three at a time took 7-8 min of the CI's 10-11, five 4.6 min.
    maxWorkers: Math.max(5, availableParallelism() - 1),
    reporters: ['default', './tests/helpers/summary-reporter.ts'],
    projects: [
      { test: { ...shared, name: 'pg', include: ['tests/**/*.test.ts'], exclude: [...shared.exclude, 'tests/fast/**'] } },
      // The runtime's decisions against the in-memory store and a fake clock: no Postgres,
      // no global setup. The files share no state, so they run unisolated in threads.
      { test: { name: 'fast', include: ['tests/fast/**/*.test.ts'], pool: 'threads', isolate: false } },
      // The tests that run workers through tests/helpers/driver.ts, once more on postgres.js.
      {
        test: {
          ...shared,
          name: 'postgres.js',
          include: [
            'tests/worker.test.ts',
            'tests/processes.test.ts',
            'tests/results.test.ts',
            'tests/unique-jobs.test.ts',
            'tests/cron.test.ts',
            'tests/typed-tasks.test.ts',
          ],
          env: { SLUICE_TEST_DRIVER: 'postgres.js' },
        },
      },
      // postgres.js 4 (a rewrite; its own parsed options) in place of 3, for Sluice and
      // the tests alike: the files that hand Sluice a postgres.js `sql` or run on it.
      {
        resolve: { alias: [{ find: /^postgres$/, replacement: 'postgres4' }] },
        test: {
          ...shared,
          name: 'postgres.js 4',
          include: [
            'tests/drivers.test.ts',
            'tests/connection-settings.test.ts',
            'tests/reconnect.test.ts',
            'tests/adapters.test.ts',
            'tests/statement-cancel.test.ts',
            'tests/worker.test.ts',
          ],
          env: { SLUICE_TEST_DRIVER: 'postgres.js' },
        },
      },
    ],
  },
});
