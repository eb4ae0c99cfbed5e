import { defineConfig } from 'vitest/config';

// End-to-end tests in real headless Chromium (Debian package `chromium`). Not part
// of `npm test`, which must pass with Node.js alone: run `npm run test:e2e`.
export default defineConfig({
  test: {
    include: ['tests/e2e/**/*.e2e.ts'],
    globalSetup: ['tests/helpers/global-setup.ts'],
    reporters: ['default', './tests/helpers/summary-reporter.ts'],
    pool: 'forks',
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
