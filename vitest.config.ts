import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['tests/**/*.test.ts'],
    // Need the Debian package pgbouncer: `npm run test:pgbouncer` (vitest.pgbouncer.config.ts).
    exclude: ['tests/pgbouncer/**', 'node_modules/**'],
    globalSetup: ['tests/helpers/global-setup.ts'],
    reporters: ['default', './tests/helpers/summary-reporter.ts'],
    pool: 'forks',
    // Each file works in its own schema, so files run in parallel safely.
    fileParallelism: true,
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
