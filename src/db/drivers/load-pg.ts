import { createRequire } from 'node:module';

/*
 * Loads node-postgres before anything else imports it, without the part of its
 * start-up that costs every process a few megabytes for nothing.
 *
 * When pg loads, it asks whether it runs in Cloudflare Workers (lib/stream.js):
 * it reads `navigator.userAgent`, and where there is no `navigator` (Node 20) it
 * constructs a `Response` to look for Cloudflare's `cf` property. On Node 20 that
 * first `Response` loads Node's whole fetch implementation (undici): measured at
 * 4.2 MB of RSS and 1.5 MB of live heap in a worker that never fetches, and a
 * larger live heap also lets V8 grow the heap further before it collects.
 *
 * So pg is required here, synchronously, with a `navigator` that says "not
 * Cloudflare" in place for that moment only: no other code runs before it is
 * removed. Nothing is done where `navigator` exists (Node 21+, where pg's check is
 * already cheap) or where pg was loaded before (the require returns the module
 * already loaded, and its check has happened). Imported first by src/index.ts, so
 * that every later `import pg from 'pg'` gets this same module from require's cache.
 */
if (typeof (globalThis as { navigator?: unknown }).navigator === 'undefined') {
  Object.defineProperty(globalThis, 'navigator', {
    value: { userAgent: 'Node.js' },
    configurable: true,
    writable: true,
    enumerable: false,
  });
  try {
    createRequire(import.meta.url)('pg');
  } finally {
    delete (globalThis as { navigator?: unknown }).navigator;
  }
}
