/**
 * The logger Sluice writes to: structured fields first, then a message, the way
 * pino, bunyan and most JSON loggers take them, so a pino logger can be passed
 * as is (`logger: pino()`). Sluice logs nothing unless given one.
 */
export interface Logger {
  debug(fields: object, message?: string): void;
  info(fields: object, message?: string): void;
  warn(fields: object, message?: string): void;
  error(fields: object, message?: string): void;
}

const LEVELS = ['debug', 'info', 'warn', 'error'] as const;

/** True when `value` has the four methods Sluice calls. */
export function isLogger(value: unknown): value is Logger {
  return (
    typeof value === 'object' &&
    value !== null &&
    LEVELS.every((level) => typeof (value as Record<string, unknown>)[level] === 'function')
  );
}

/** An error as log fields: message, code and stack, never the whole object graph. */
export function errorFields(err: unknown): { message: string; code?: string; stack?: string } {
  try {
    if (!(err instanceof Error)) return { message: String(err) };
    const { code, stack } = err as { code?: unknown; stack?: unknown };
    return {
      message: String(err.message),
      ...(typeof code === 'string' ? { code } : {}),
      ...(typeof stack === 'string' && stack ? { stack } : {}),
    };
  } catch {
    // A value whose reading throws (a revoked Proxy, a hostile getter): a log line must not.
    return { message: 'a value that cannot be read' };
  }
}
