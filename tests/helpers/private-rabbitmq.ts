import { execFile, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);
const SERVER = '/usr/sbin/rabbitmq-server';
const CTL = '/usr/sbin/rabbitmqctl';

/** A RabbitMQ node of the test's own (own data directory, ports and node name), for settings the shared broker must keep. */
export interface PrivateRabbitMq {
  readonly url: string;
  /** Runs rabbitmqctl against this node. */
  ctl(...args: string[]): Promise<string>;
  stop(): Promise<void>;
}

/** Why no private node can be started here (the Debian package, and root to hand its directory to the rabbitmq user), if so. */
export function privateRabbitMqMissing(): string | undefined {
  if (!existsSync(SERVER)) return `${SERVER} is not installed`;
  if (process.getuid?.() !== 0) return 'a private RabbitMQ node needs root (its files belong to the rabbitmq user)';
  return undefined;
}

/** A port free now: the node listens on it moments later. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

export async function startPrivateRabbitMq(label: string): Promise<PrivateRabbitMq> {
  const dir = await mkdtemp(join(tmpdir(), `sluice-${label}-rmq-`));
  const [port, distPort] = [await freePort(), await freePort()];
  const node = `sluice_${label}_${process.pid}@localhost`;
  await writeFile(join(dir, 'enabled_plugins'), '[].\n');
  await writeFile(join(dir, 'rabbitmq.conf'), `listeners.tcp.local = 127.0.0.1:${port}\nloopback_users = none\n`);
  await run('chown', ['-R', 'rabbitmq', dir]);
  const child = spawn(SERVER, [], {
    detached: true,
    stdio: 'ignore',
    env: {
      ...process.env,
      RABBITMQ_NODENAME: node,
      RABBITMQ_NODE_PORT: String(port),
      RABBITMQ_DIST_PORT: String(distPort),
      RABBITMQ_MNESIA_BASE: join(dir, 'mnesia'),
      RABBITMQ_LOG_BASE: join(dir, 'log'),
      RABBITMQ_ENABLED_PLUGINS_FILE: join(dir, 'enabled_plugins'),
      RABBITMQ_CONFIG_FILE: join(dir, 'rabbitmq'),
      RABBITMQ_PID_FILE: join(dir, 'pid'),
    },
  });
  child.unref();
  const ctl = async (...args: string[]) => (await run(CTL, ['-n', node, ...args], { timeout: 60_000 })).stdout;
  const stop = async () => {
    await ctl('stop').catch(() => {
      if (child.pid) process.kill(-child.pid, 'SIGKILL');
    });
    await rm(dir, { recursive: true, force: true });
  };
  try {
    // Waits for the node to boot (Erlang's start takes 10-20 s on a loaded machine).
    await ctl('wait', '--timeout', '90', join(dir, 'pid'));
    await ctl('await_startup');
  } catch (err) {
    await stop();
    throw err;
  }
  return { url: `amqp://guest:guest@127.0.0.1:${port}`, ctl, stop };
}
