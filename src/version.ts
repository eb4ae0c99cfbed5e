/**
 * This package's version, as in package.json (`npm version` writes it here too:
 * scripts/sync-version.mjs; a test checks they agree). A constant rather than a
 * read of package.json at run time, which a bundle (esbuild) cannot follow: it
 * failed at import, or found the application's own package.json (outside review 262).
 */
export const VERSION = '0.1.0';
