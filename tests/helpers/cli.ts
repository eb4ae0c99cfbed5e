import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, beforeEach } from 'vitest';
import { Queue } from '../../src/index.js';
import { createTestSchema, type TestDatabase } from './database.js';

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

/** What `Date#toISOString` writes: the one time format of the CLI. */
export const ISO_UTC = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

/** A CLI test file's own schema, emptied before each test, and the sluice executable pointed at it. */
export interface CliSchema {
  readonly db: TestDatabase;
  readonly queue: Queue;
  /** DATABASE_URL and SLUICE_SCHEMA for a sluice process. */
  readonly env: Record<string, string>;
  sluice(...args: string[]): Promise<CliResult>;
}

/** Registers the hooks that make, empty and drop the schema; call at a test file's top level. */
export function cliSchema(name: string): CliSchema {
  let db: TestDatabase | undefined;
  let queue: Queue | undefined;
  const ready = <T>(value: T | undefined): T => {
    if (value === undefined) throw new Error('cliSchema: used outside a test');
    return value;
  };
  beforeAll(async () => {
    db = await createTestSchema(name);
    queue = new Queue({ pool: db.pool, schema: db.schema });
  });
  afterAll(async () => {
    await db?.drop();
  });
  beforeEach(async () => {
    await ready(db).pool.query(`TRUNCATE ${ready(db).s}.jobs, ${ready(db).s}.jobs_history`);
  });
  const fixture: CliSchema = {
    get db() {
      return ready(db);
    },
    get queue() {
      return ready(queue);
    },
    get env() {
      return { DATABASE_URL: ready(db).url, SLUICE_SCHEMA: ready(db).schema };
    },
    sluice: (...args: string[]) => runSluice(args, fixture.env),
  };
  return fixture;
}
