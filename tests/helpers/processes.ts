import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const WORKER_SCRIPT = fileURLToPath(new URL('../fixtures/worker-process.ts', import.meta.url));

export interface WorkerProcess {
  child: ChildProcess;
  /** Resolves with the exit code (or signal name). */
  exited: Promise<number | string>;
  output(): string;
}

/** Spawns a worker script (default tests/fixtures/worker-process.ts) and resolves once it printed "ready". */
export async function spawnWorker(env: Record<string, string>, script = WORKER_SCRIPT): Promise<WorkerProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', script], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (out += d));
  const exited = new Promise<number | string>((resolve) =>
    child.on('exit', (code, signal) => resolve(code ?? signal ?? 'unknown')),
  );
  await new Promise<void>((resolve, reject) => {
    const onData = () => {
      if (out.includes('ready')) {
        child.stdout!.off('data', onData);
        resolve();
      }
    };
    child.stdout!.on('data', onData);
    void exited.then((code) => reject(new Error(`worker exited (${code}) before ready:\n${out}`)));
  });
  return { child, exited, output: () => out };
}

/**
 * The child side of spawnWorker: starts the worker, prints "ready", and on
 * SIGTERM stops it gracefully, runs `cleanup` and exits 0.
 */
export async function serveUntilSigterm(
  worker: { start(): Promise<void>; stop(): Promise<void> },
  cleanup: () => Promise<void>,
): Promise<void> {
  process.on('SIGTERM', () => {
    void worker.stop().then(async () => {
      await cleanup();
      process.exit(0);
    });
  });
  await worker.start();
  process.stdout.write('ready\n');
}
