import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/** The real executable, as installed users run it (needs `npm run build` first; `npm test` does it). */
export const BIN = fileURLToPath(new URL('../../bin/sluice.js', import.meta.url));
export const FIXTURES = fileURLToPath(new URL('../fixtures/', import.meta.url));

export interface CliResult {
  code: number | string;
  stdout: string;
  stderr: string;
}

export interface CliProcess {
  child: ChildProcess;
  exited: Promise<CliResult>;
  stdout(): string;
  stderr(): string;
}

/**
 * Spawns `node [nodeArgs] bin/sluice.js args` with `env` on top of a copy of this
 * process's environment minus DATABASE_URL and SLUICE_SCHEMA, so each test says
 * exactly where the CLI connects.
 */
export function spawnCli(args: string[], env: Record<string, string> = {}, nodeArgs: string[] = []): CliProcess {
  const base = { ...process.env };
  delete base.DATABASE_URL;
  delete base.SLUICE_SCHEMA;
  const child = spawn(process.execPath, [...nodeArgs, BIN, ...args], {
    env: { ...base, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d) => (stdout += d));
  child.stderr!.on('data', (d) => (stderr += d));
  const exited = new Promise<CliResult>((resolve) =>
    child.on('close', (code, signal) => resolve({ code: code ?? signal ?? 'unknown', stdout, stderr })),
  );
  return { child, exited, stdout: () => stdout, stderr: () => stderr };
}

/** Runs the CLI to completion with `env` (see spawnCli). */
export function runSluice(args: string[], env: Record<string, string> = {}): Promise<CliResult> {
  return spawnCli(args, env).exited;
}

/** Runs the CLI to completion against a schema given as flags. */
export function runCli(url: string, schema: string, args: string[]): Promise<CliResult> {
  return runSluice(['--database-url', url, '--schema', schema, ...args]);
}
