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

/**
 * `logger` with each call kept from throwing into Sluice: a logger that fails (its
 * transport gone, a bug of its own) said so from inside a LISTEN notification as an
 * uncaught exception, which ended the process and its running jobs (outside review
 * 279). A throw becomes a process warning (SLUICE_LOGGER), once per level.
 */
export function safeLogger(logger: Logger): Logger {
  const warned = new Set<string>();
  const warn = (level: string, err: unknown) => {
    if (warned.has(level)) return;
    warned.add(level);
    process.emitWarning(`sluice: the logger's ${level}() threw or rejected (said once per level): ${errorFields(err).message}`, {
      code: 'SLUICE_LOGGER',
    });
  };
  const call =
    (level: (typeof LEVELS)[number]) =>
    (fields: object, message?: string): void => {
      try {
        // Called on the logger: pino's methods need their `this`.
        const returned: unknown = logger[level](fields, message);
        // An async method's rejection, unhandled, ended the process as a throw did (outside review 280).
        if (typeof (returned as PromiseLike<unknown> | null)?.then === 'function') {
          (returned as PromiseLike<unknown>).then(undefined, (err: unknown) => warn(level, err));
        }
      } catch (err) {
        warn(level, err);
      }
    };
  return { debug: call('debug'), info: call('info'), warn: call('warn'), error: call('error') };
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
