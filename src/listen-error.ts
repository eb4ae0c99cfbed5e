import { ConfigError } from './errors.js';

/**
 * Why an HTTP server (the metrics endpoint, the dashboard) could not listen, as
 * the options' mistake: a taken port, a host that does not resolve or is not this
 * machine's, a port below 1024 without the right. An errno error alone read as a
 * failed query, or as a crash with its stack (outside reviews 127, 201).
 */
export function listenError(err: unknown, what: string, host: string, port: number): ConfigError {
  const code = (err as NodeJS.ErrnoException | null)?.code;
  return new ConfigError(
    code === 'EADDRINUSE'
      ? `${what}: port ${port} on ${host} is already in use (choose another port, or 0 for any free one)`
      : `${what}: cannot listen on ${host} port ${port}: ${(err as Error).message}`,
    { cause: err },
  );
}

/**
 * A host to listen on, refused when empty: Node takes '' as every interface, so an
 * unset variable in a script (`--host "$HOST"`) served on all of them (outside review 206).
 */
export function checkListenHost(what: string, host: string): void {
  if (host.trim() === '') {
    throw new ConfigError(
      `${what}: the host to listen on is empty (an unset variable?): give 127.0.0.1, or 0.0.0.0 for every interface`,
    );
  }
}
