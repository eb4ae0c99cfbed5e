import { defineConfig } from 'vitest/config';

// `npm run test:pgbouncer`: tests that start the Debian package pgbouncer, kept
// out of `npm test` so that it runs on a machine with only Node.js.
export default defineConfig({
  test: {
    include: ['tests/pgbouncer/**/*.test.ts'],
    globalSetup: ['tests/helpers/global-setup.ts'],
    reporters: ['default', './tests/helpers/summary-reporter.ts'],
    pool: 'forks',
    // Each file starts a PgBouncer of its own on a free port, and mostly waits: on 2
    // cores vitest's default ran them one at a time (45 s; 20 s four at a time).
    maxWorkers: 4,
    testTimeout: 90_000,
    hookTimeout: 60_000,
  },
});
