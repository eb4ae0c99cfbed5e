/**
 * The published declarations as a TypeScript application type-checks them: the
 * packed tarball (`npm pack`) unpacked into a temporary app's node_modules, next
 * to Sluice's runtime dependencies and @types/node, and `tsc --noEmit` with
 * `skipLibCheck: false` and `strict` on a small program using Queue, Worker and
 * migrate. Once without @types/pg (Sluice's declarations must not need it), once
 * with it (the application's own pg.Pool must be accepted as is). The app's
 * packages are links into this repository's node_modules, so no registry is
 * needed. Needs `npm run build` first (`npm test` does it). Generous time limits:
 * tsc takes seconds alone and much longer on a loaded machine (limits, not assertions).
 */
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const TSC = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
const pkg = JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')) as { dependencies: Record<string, string> };

const TSCONFIG = {
  compilerOptions: {
    target: 'es2022',
    module: 'nodenext',
    moduleResolution: 'nodenext',
    strict: true,
    // An app's env var is string | undefined: the options take it as left out (outside review 174).
    exactOptionalPropertyTypes: true,
    skipLibCheck: false,
    noEmit: true,
  },
  include: ['*.ts'],
};

/** Uses the API through a connection string only: nothing here names pg. */
const WITHOUT_PG = `
import { migrate, Queue, Worker, type JobContext } from 'sluice';

// string | undefined, as process.env.DATABASE_URL is.
const connectionString = ['postgres://localhost/app'].find(Boolean);
await migrate({ connectionString, schema: 'app' });
const queue = new Queue<{ send: { to: string } }>({ connectionString });
const id: string = await queue.enqueue('send', { to: 'a@example.com' }, { delayMs: 10 });
const worker = new Worker({
  connectionString,
  tasks: {
    send: async (payload: { to: string }, { signal }: JobContext) => {
      signal.throwIfAborted();
      return payload.to.length;
    },
  },
});
await worker.start();
await worker.stop();
console.log(id, worker.metricsUrl, (await queue.pool?.query('SELECT 1'))?.rows);
// Options passed through as string | undefined or number | undefined, as the runtime
// takes them (left out): TS2379 under exactOptionalPropertyTypes (outside review 273).
const maybe = <V>(v: V): V | undefined => v;
await queue.enqueue('send', { to: 'b@example.com' }, { queue: process.env.QUEUE, delayMs: maybe(5), priority: undefined, jobKey: undefined });
await queue.enqueueMany([{ task: 'send', payload: { to: 'c@example.com' }, maxAttempts: maybe(3) }]);
// Except tx: a variable that should hold your client and does not would enqueue outside your transaction.
// @ts-expect-error tx must be a client when given
await queue.enqueue('send', { to: 'd@example.com' }, { tx: maybe(undefined) });
await queue.waitFor(id, { timeoutMs: maybe(1_000), pollIntervalMs: undefined });
new Worker({ connectionString, concurrency: maybe(4), logger: undefined, queues: undefined, backoff: undefined, tasks: {} });
// Nested options too (outside review 276).
new Worker({
  connectionString,
  tasks: { t: { handler: async () => {}, timeoutMs: maybe(1_000), maxAttempts: maybe(2), backoff: { baseMs: maybe(10), maxMs: undefined } } },
  backoff: { baseMs: maybe(100), shape: undefined },
  maintenance: { leaseMs: maybe(10_000), pruner: { delayMs: maybe(1), mode: undefined } },
  metrics: { port: maybe(9464), host: process.env.HOST },
  schedules: [{ name: 'n', cron: '* * * * *', task: 't', timezone: process.env.TZ, queue: process.env.QUEUE, backfill: maybe(1) }],
});
new Queue({ connectionString, maxPayloadBytes: maybe(1_000), schemas: undefined, driver: undefined });
// The declarations are real types, not any: a number is no pool.
// @ts-expect-error pool must be a pg Pool
new Queue({ pool: 42 });
`;

/** An application with @types/pg: its own Pool and PoolClient go in as they are. */
const WITH_PG = `
import pg from 'pg';
import { migrate, Queue, Worker } from 'sluice';

const pool = new pg.Pool({ connectionString: 'postgres://localhost/app' });
await migrate({ pool, schema: 'app' });
const queue = new Queue({ pool, schema: 'app' });
const client: pg.PoolClient = await pool.connect();
await client.query('BEGIN');
await queue.enqueue('send', { to: 'a@example.com' }, { tx: client });
await client.query('COMMIT');
client.release();
const worker = new Worker({ pool, schema: 'app', tasks: { send: async () => {} } });
await worker.start();
await worker.stop();
const one: unknown[] | undefined = (await queue.pool?.query('SELECT 1'))?.rows;
console.log(one);
// @ts-expect-error pool must be a pg Pool
new Worker({ pool: { query: 1 }, tasks: {} });
`;

/** The dashboard mounted as the README shows, its options from env vars (string | undefined). */
const DASHBOARD = `
import { createServer } from 'node:http';
import { createDashboardHandler } from 'sluice/dashboard';

// Outside review 245: token was a TS2379 under exactOptionalPropertyTypes.
const handler = await createDashboardHandler({
  connectionString: process.env.DATABASE_URL,
  basePath: process.env.SLUICE_BASE_PATH,
  token: process.env.SLUICE_DASHBOARD_TOKEN,
  listenConnectionString: process.env.SLUICE_LISTEN_URL,
});
createServer((req, res) => void handler.handle(req, res)).listen(3000);
`;

let work: string;
let tarball: string;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'sluice-types-'));
  const { stdout } = await run('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', work], { cwd: ROOT });
  tarball = join(work, (JSON.parse(stdout) as { filename: string }[])[0]!.filename);
}, 180_000);
afterAll(async () => {
  await rm(work, { recursive: true, force: true });
});

/** A fresh app holding the unpacked tarball, links to `packages`, each of `programs` as a .ts file of the app and the tsconfig. */
async function app(name: string, packages: string[], programs: Record<string, string>): Promise<string> {
  const dir = join(work, name);
  const sluice = join(dir, 'node_modules', 'sluice');
  await mkdir(sluice, { recursive: true });
  await run('tar', ['-xzf', tarball, '-C', sluice, '--strip-components=1']);
  for (const name of packages) {
    const link = join(dir, 'node_modules', name);
    await mkdir(dirname(link), { recursive: true });
    await symlink(join(ROOT, 'node_modules', name), link, 'dir');
  }
  await writeFile(join(dir, 'package.json'), JSON.stringify({ name, private: true, type: 'module' }));
  await writeFile(join(dir, 'tsconfig.json'), JSON.stringify(TSCONFIG));
  for (const [file, program] of Object.entries(programs)) await writeFile(join(dir, file), program);
  return dir;
}

/** tsc's output and exit code for the app in `dir`. */
async function typecheck(dir: string): Promise<{ code: number; output: string }> {
  try {
    const { stdout } = await run(process.execPath, [TSC, '-p', dir], { cwd: dir });
    return { code: 0, output: stdout };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, output: `${e.stdout}${e.stderr}` };
  }
}

const RUNTIME = [...Object.keys(pkg.dependencies), '@types/node'];

describe('the published declarations, with skipLibCheck off', () => {
  it('type-check without @types/pg or fastify', async () => {
    const dir = await app('no-types-pg', RUNTIME, { 'index.ts': WITHOUT_PG });
    const declarations = await readFile(join(dir, 'node_modules', 'sluice', 'dist', 'db', 'connection.d.ts'), 'utf8');
    expect(declarations).not.toMatch(/from 'pg'/);
    expect(await typecheck(dir)).toEqual({ code: 0, output: '' });
  }, 180_000);

  // One app and one tsc run for both: each run checks all of @types/node and the packages again.
  it("accept the application's pg.Pool and PoolClient with @types/pg, and the dashboard options from env vars under exactOptionalPropertyTypes", async () => {
    const dir = await app('with-types-pg', [...RUNTIME, '@types/pg', 'fastify'], {
      'index.ts': WITH_PG,
      'dashboard.ts': DASHBOARD,
    });
    expect(await typecheck(dir)).toEqual({ code: 0, output: '' });
  }, 180_000);
});
