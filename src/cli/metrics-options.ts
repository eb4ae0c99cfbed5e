import { InvalidArgumentError, type Command } from 'commander';
import { integer } from './parse.js';

/** The flags a long-running command (`sluice worker`, `sluice relay`) serves its Prometheus metrics with. */
export interface MetricsFlags {
  metricsPort?: number;
  metricsHost: string;
}

/**
 * Adds --metrics-port and --metrics-host to a long-running command. A host given
 * without a port is refused: it served nothing, silently (outside review 127).
 */
export function addMetricsOptions(command: Command): Command {
  return command
    .option('--metrics-port <n>', 'serve Prometheus metrics at GET /metrics on this port (0: any free port)', integer(0, 65_535))
    .option('--metrics-host <host>', 'interface for --metrics-port (0.0.0.0: scraped from other hosts)', host, '127.0.0.1')
    .hook('preAction', (cmd) => {
      if (cmd.getOptionValueSource('metricsHost') === 'cli' && cmd.opts<MetricsFlags>().metricsPort === undefined) {
        cmd.error("error: option '--metrics-host <host>' needs --metrics-port <n> (no metrics are served without a port)");
      }
    });
}

/**
 * A host name or address, an IPv6 one with or without its brackets ([::1] as in a
 * URL; Node's listen() takes it bare). Empty is refused here, not by the Worker's
 * "metrics.host" (outside review 130).
 */
function host(value: string): string {
  const bare = value.trim().replace(/^\[(.*)\]$/, '$1');
  if (bare === '') throw new InvalidArgumentError('must be a host name or an IP address');
  return bare;
}
