import { ConfigError } from '../../errors.js';

/**
 * Refuses, when the adapter is made, what has no `method()` to send statements
 * through: an `undefined` trx was a TypeError from inside the adapter, and 42 a
 * DatabaseError at the enqueue though nothing had been sent (outside reviews 245, 254).
 */
export function requireMethod(value: unknown, method: string, adapter: string, what: string): void {
  if (typeof (value as Record<string, unknown> | null | undefined)?.[method] === 'function') return;
  const got =
    value === null
      ? 'null'
      : typeof value === 'object' || typeof value === 'function'
        ? `an object without ${method}()`
        : typeof value;
  throw new ConfigError(`${adapter}: give it ${what}, got ${got}`);
}
