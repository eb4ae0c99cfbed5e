/**
 * What the `sluice` executable says when something is wrong: one line on stderr,
 * no stack, naming what to do. Real processes (node bin/sluice.js, built by
 * `npm test`), this file's own schema.
 */
import { mkdtemp, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError } from '../src/errors.js';
import { SluiceMetrics } from '../src/index.js';
import { serveMetrics } from '../src/metrics/server.js';
import { createTestSchema, waitFor, type TestDatabase } from './helpers/database.js';
import { FIXTURES, runSluice, spawnCli, type CliResult } from './helpers/cli.js';

let db: TestDatabase;
let dir: string;

beforeAll(async () => {
  db = await createTestSchema('clierr');
  dir = await mkdtemp(join(tmpdir(), 'sluice-cli-errors-'));
});
afterAll(async () => {
  await db.drop();
});

/** A failure is one line on stderr, with no stack trace. */
function expectOneLine(result: CliResult, code: number, pattern: RegExp): void {
  expect(result.code, result.stderr).toBe(code);
  const lines = result.stderr
    .trim()
    .split('\n')
    .filter((l) => l !== '(add --help for usage)');
  expect(lines, result.stderr).toHaveLength(1);
  expect(lines[0]).toMatch(pattern);
  expect(result.stderr).not.toMatch(/^\s+at /m);
}

/** The test database's URL with another user or database. */
function urlWith(change: (url: URL) => void): string {
  const url = new URL(db.url);
  change(url);
  return url.href;
}

describe('database URL', () => {
  it.each([
    ['not-a-url', /^sluice: the database URL is not a URL; it should look like postgres:\/\/user:password@host:5432\/database$/],
    ['mysql://root:secret@db/app', /^sluice: the database URL must be a postgres:\/\/ or postgresql:\/\/ URL, not mysql:$/],
    ['postgres://u:p@[bad/db', /^sluice: the database URL is not a valid URL; .*percent-encoded\)$/],
    // Outside review 262: "not localhost:", as if localhost were a scheme.
    [
      'localhost:5432',
      /^sluice: the database URL has no scheme; it should look like postgres:\/\/user:password@host:5432\/database$/,
    ],
  ])('%s is a usage error that says what a URL looks like, never echoing it', async (url, pattern) => {
    for (const command of [['stats'], ['migrate']]) {
      const result = await runSluice(command, { DATABASE_URL: url });
      expectOneLine(result, 2, pattern);
      expect(result.stderr).not.toContain('secret');
    }
  });

  it('a refused login and a missing database are worded as such, not as "cannot reach"', async () => {
    const noRole = urlWith((u) => (u.username = 'sluice_no_such_role'));
    const noDb = urlWith((u) => (u.pathname = '/sluice_no_such_db'));
    for (const command of [['migrate'], ['enqueue', 'x']]) {
      expectOneLine(
        await runSluice(command, { DATABASE_URL: noRole }),
        1,
        // Trust auth (the CI server) says the role does not exist; password auth (the
        // embedded server, when DATABASE_URL is unset) says the login failed.
        /^sluice: Postgres at .*: (role "sluice_no_such_role" does not exist \(check the user in the database URL, and pg_hba\.conf\)|password authentication failed for user "sluice_no_such_role" \(check the user and password in the database URL\))$/,
      );
      expectOneLine(
        await runSluice(command, { DATABASE_URL: noDb }),
        1,
        /^sluice: Postgres at .*\/sluice_no_such_db: database "sluice_no_such_db" does not exist \(create it, or fix the database name in the URL\)$/,
      );
    }
  });
});

describe('demo', () => {
  it('a Postgres it cannot reach is one line, no stack (outside review 266)', async () => {
    const away = urlWith((u) => (u.port = '1'));
    expectOneLine(
      await runSluice(['demo', '--jobs', '5'], { DATABASE_URL: away }),
      1,
      /^sluice: cannot reach Postgres at 127\.0\.0\.1:1\//,
    );
  });
});

describe('task module', () => {
  const worker = (file: string) => runSluice(['worker', '--tasks', file], { DATABASE_URL: db.url, SLUICE_SCHEMA: db.schema });

  it('a syntax error names the file and line, also in a module it imports, also in CommonJS', async () => {
    const broken = join(dir, 'broken.mjs');
    await writeFile(broken, 'export const tasks = {\n  a: async () => 1,\n  b: async () => {\n};\n');
    await writeFile(join(dir, 'imports-broken.mjs'), "import './broken.mjs';\nexport const tasks = {};\n");
    await writeFile(join(dir, 'broken.cjs'), 'module.exports = { tasks: {\n  a: 1,,\n} };\n');
    expectOneLine(
      await worker(broken),
      1,
      /^sluice: cannot load task module .*broken\.mjs: SyntaxError: .* \(at .*broken\.mjs:4\)$/,
    );
    expectOneLine(
      await worker(join(dir, 'imports-broken.mjs')),
      1,
      /^sluice: cannot load task module .*imports-broken\.mjs: SyntaxError: .* \(at .*[/]broken\.mjs:4\)$/,
    );
    expectOneLine(
      await worker(join(dir, 'broken.cjs')),
      1,
      /^sluice: cannot load task module .*broken\.cjs: SyntaxError: Unexpected token ',' \(at .*broken\.cjs:2\)$/,
    );
  });

  it('a module that throws a value that is not an Error says what it threw (outside review 167)', async () => {
    for (const [name, source, said] of [
      ['throws-null.mjs', 'throw null;\n', 'it threw null'],
      ['throws-object.mjs', 'throw { reason: 1 };\n', 'it threw { reason: 1 }'],
      ['rejects-string.mjs', 'export const tasks = {};\nawait Promise.reject("a string");\n', "it threw 'a string'"],
      ['throws-bare.mjs', 'throw Object.create(null);\n', 'it threw [Object: null prototype] {}'],
    ]) {
      const file = join(dir, name!);
      await writeFile(file, source!);
      const result = await worker(file);
      expectOneLine(result, 1, /^sluice: cannot load task module /);
      expect(result.stderr).toContain(said);
    }
  });

  it('a top-level await that never settles is said, exit 1, not a silent status 13 (outside review 166)', async () => {
    const file = join(dir, 'hangs.mjs');
    await writeFile(file, 'await new Promise(() => {});\nexport const tasks = {};\n');
    expectOneLine(await worker(file), 1, /^sluice: cannot load task module .*hangs\.mjs: its top-level await never settled$/);
  });

  it('an error nothing catches while it loads is logged as an uncaught line with its stack, exit 1, not as a Node crash', async () => {
    const file = join(dir, 'rejects-loose.mjs');
    await writeFile(file, "Promise.reject(new Error('loose at load'));\nexport const tasks = { a: () => 1 };\n");
    const result = await worker(file);
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(
      /^\S+ uncaught origin=unhandledRejection before=start error: Error: loose at load stack=Error: loose at load\n\s+at .*rejects-loose\.mjs:1:/,
    );
    expect(result.stderr).not.toContain('Node.js v');
  });

  it('a CommonJS module that exports only schedules is told it exports no tasks, not that "schedules" is no function (outside review 206)', async () => {
    const file = join(dir, 'schedules-only.cjs');
    await writeFile(file, "exports.schedules = [{ name: 's', cron: '* * * * * *', task: 'elsewhere' }];\n");
    expectOneLine(await worker(file), 2, /^sluice: task module .*schedules-only\.cjs must export `tasks`/);
  });

  it('a CommonJS module compiled from named exports, none of them `tasks`, is told so, not that an export is no function (outside review 262)', async () => {
    const file = join(dir, 'misnamed.cjs');
    await writeFile(
      file,
      '"use strict";\nObject.defineProperty(exports, "__esModule", { value: true });\nexports.handlers = { a: async () => 1 };\n',
    );
    expectOneLine(await worker(file), 2, /^sluice: task module .*misnamed\.cjs must export `tasks`/);
  });

  it('an error thrown while it loads names the line that threw', async () => {
    const file = join(dir, 'throws.mjs');
    await writeFile(file, 'const config = undefined;\nconst url = config.url;\nexport const tasks = { a: () => url };\n');
    expectOneLine(
      await worker(file),
      1,
      /^sluice: cannot load task module .*throws\.mjs: TypeError: Cannot read properties of undefined \(reading 'url'\) \(at .*throws\.mjs:2:\d+\)$/,
    );
  });
});

describe('help and notes', () => {
  it('duration defaults are shown the way the option takes them', async () => {
    expect((await runSluice(['worker', '--help'])).stdout).toMatch(/--shutdown-timeout <duration>[\s\S]*\(default: "10s"\)/);
    expect((await runSluice(['stats', '--help'])).stdout).toMatch(/--interval <duration>[\s\S]*\(default: "2s"\)/);
  });

  it('enqueue into a paused queue adds the job and says on stderr that it waits', async () => {
    const env = { DATABASE_URL: db.url, SLUICE_SCHEMA: db.schema };
    expect((await runSluice(['queues', 'pause', 'held', '--create'], env)).code).toBe(0);
    const held = await runSluice(['enqueue', 'x', '--queue', 'held'], env);
    expect(held.code).toBe(0);
    expect(held.stdout).toMatch(/^\d+\n$/);
    expect(held.stderr).toBe('note: queue "held" is paused: no worker takes the job until `sluice queues resume held`\n');
    const running = await runSluice(['enqueue', 'x', '--queue', 'free'], env);
    expect(running).toMatchObject({ code: 0, stderr: '' });
    // A name with escape codes and a space: escaped for the terminal, quoted for the shell (outside review 267).
    const odd = "it's\x1b[2J\u009b x";
    expect((await runSluice(['queues', 'pause', odd, '--create'], env)).code).toBe(0);
    const oddNote = await runSluice(['enqueue', 'x', '--queue', odd], env);
    expect(oddNote.stderr).toBe(
      `note: queue "it's\\u001b[2J\\u009b x" is paused: no worker takes the job until \`sluice queues resume 'it'\\''s\\u001b[2J\\u009b x'\`\n`,
    );
  });
});

describe('ports in use', () => {
  async function occupiedPort(): Promise<{ port: number; close(): void }> {
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return { port: (server.address() as { port: number }).port, close: () => server.close() };
  }

  it('sluice dashboard on a taken port: one line, which port, what to do', async () => {
    const taken = await occupiedPort();
    try {
      const result = await runSluice(['dashboard', '--port', String(taken.port)], {
        DATABASE_URL: db.url,
        SLUICE_SCHEMA: db.schema,
      });
      expectOneLine(
        result,
        2,
        new RegExp(
          `^sluice: dashboard: port ${taken.port} on 127\\.0\\.0\\.1 is already in use \\(choose another port, or 0 for any free one\\)$`,
        ),
      );
    } finally {
      taken.close();
    }
  });

  it('sluice dashboard with a refused login or an unmigrated schema exits 1, not started; one out of reach starts (outside review 265)', async () => {
    const noUser = urlWith((u) => (u.username = 'no_such_role_here'));
    expectOneLine(
      await runSluice(['dashboard', '--port', '0'], { DATABASE_URL: noUser, SLUICE_SCHEMA: db.schema }),
      1,
      /^sluice: Postgres at .*(role "no_such_role_here" does not exist|password authentication failed for user "no_such_role_here")/,
    );
    expectOneLine(
      await runSluice(['dashboard', '--port', '0'], { DATABASE_URL: db.url, SLUICE_SCHEMA: 'never_migrated_here' }),
      1,
      /^sluice: no Sluice tables in schema "never_migrated_here" at .*: run `sluice migrate` first$/,
    );
    // Quoted as JSON: a quote in the name is escaped, not taken for the end (outside review 279).
    expectOneLine(
      await runSluice(['stats', '--schema', 'a"b'], { DATABASE_URL: db.url }),
      1,
      /^sluice: no Sluice tables in schema "a\\"b" at .*: run `sluice migrate` first$/,
    );
    const away = spawnCli(['dashboard', '--port', '0'], {
      DATABASE_URL: urlWith((u) => (u.port = '1')),
      SLUICE_SCHEMA: db.schema,
    });
    try {
      await waitFor(() => away.stdout().includes('sluice dashboard on http://127.0.0.1:'), 'the dashboard serving');
    } finally {
      away.child.kill();
      await away.exited;
    }
  });

  it("sluice dashboard on a host that is not this machine's, or does not resolve: one line, exit 2, no stack (outside review 201)", async () => {
    const env = { DATABASE_URL: db.url, SLUICE_SCHEMA: db.schema };
    for (const host of ['192.0.2.1', 'no-such-host.invalid']) {
      const result = await runSluice(['dashboard', '--host', host, '--token', 'abcdefghijk', '--port', '0'], env);
      expectOneLine(result, 2, new RegExp(`^sluice: dashboard: cannot listen on ${host.replace(/\./g, '\\.')} port 0: `));
    }
    // Empty (an unset variable): Node would listen on every interface (outside review 206).
    expectOneLine(
      await runSluice(['dashboard', '--host', '', '--token', 'abcdefghijk', '--port', '0'], env),
      2,
      /^sluice: dashboard: the host to listen on is empty \(an unset variable\?\)/,
    );
  });

  it('sluice dashboard --user without a password is refused (outside review 230: it started with no auth at all); --listen-url is checked as a URL', async () => {
    const env = { DATABASE_URL: db.url, SLUICE_SCHEMA: db.schema };
    expectOneLine(await runSluice(['dashboard', '--user', 'bob', '--port', '0'], env), 2, /--user needs --password/);
    expectOneLine(await runSluice(['dashboard', '--listen-url', 'not a url', '--port', '0'], env), 2, /--listen-url <url>/);
    // A listen URL whose login is refused: not started (outside review 231: a log line a second, no live feed),
    // the flag named, not the library's option (outside review 235).
    // Refused as a missing role under trust auth, as a wrong password by the embedded Postgres (no DATABASE_URL).
    const noUser = new URL(db.url);
    noUser.username = 'no_such_role_here';
    expectOneLine(
      await runSluice(['dashboard', '--listen-url', noUser.href, '--port', '0'], env),
      2,
      /^sluice: --listen-url: Postgres at .*(role "no_such_role_here" does not exist|password authentication failed for user "no_such_role_here")/,
    );
    // The worker's was told as the database URL's own refusal (exit 1).
    expectOneLine(
      await runSluice(['worker', '--tasks', `${FIXTURES}cli-tasks.mjs`, '--listen-url', noUser.href], env),
      2,
      /^sluice: --listen-url: Postgres at .*(role "no_such_role_here" does not exist|password authentication failed for user "no_such_role_here")/,
    );
  });

  it('sluice dashboard --listen-url at a server that accepts and never answers: starts and serves, the LISTEN left to retry (outside review 235: it exited)', async () => {
    const env = { DATABASE_URL: db.url, SLUICE_SCHEMA: db.schema };
    const held: import('node:net').Socket[] = [];
    const silent = createServer((socket) => void held.push(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const { port } = silent.address() as import('node:net').AddressInfo;
    const dashboard = spawnCli(['dashboard', '--port', '0', '--listen-url', `postgres://postgres@127.0.0.1:${port}/x`], env);
    try {
      await waitFor(() => /sluice dashboard on (http:\S+)/.test(dashboard.stdout()), 'the dashboard to start', 30_000);
      const url = /sluice dashboard on (http:\S+)/.exec(dashboard.stdout())![1]!;
      expect((await fetch(new URL('api/status', url))).status).toBe(200);
    } finally {
      dashboard.child.kill('SIGTERM');
      for (const s of held) s.destroy();
      silent.close();
    }
    expect((await dashboard.exited).code).toBe(0);
  });

  it('sluice dashboard --refresh takes a duration with a unit; --refresh-ms stays, not both', async () => {
    const env = { DATABASE_URL: db.url, SLUICE_SCHEMA: db.schema };
    const refused: [string[], RegExp][] = [
      [['--refresh', '5'], /--refresh <duration>.*needs a unit: 5ms for milliseconds, 5s for seconds/],
      [['--refresh', '50ms'], /--refresh <duration>.*from 100ms to 1h/],
      // The range, not examples outside it (outside review 211: "like ... 2h or 7d", and 2h then refused).
      [['--refresh', ''], /--refresh <duration>.*must be a duration with a unit \(ms, s, m, h, d\) from 100ms to 1h$/],
      [['--refresh', 'abc'], /--refresh <duration>.*must be a duration with a unit \(ms, s, m, h, d\) from 100ms to 1h$/],
      [['--refresh', 'x'.repeat(101)], /--refresh <duration>.*must be a duration with a unit/],
      [['--refresh', '2s', '--refresh-ms', '500'], /give --refresh or --refresh-ms, not both/],
      [['--refresh-ms', '50'], /--refresh-ms must be an integer from 100 to 3600000/],
    ];
    for (const [flags, message] of refused) expectOneLine(await runSluice(['dashboard', ...flags], env), 2, message);
    // Taken as given: the command goes on to bind its port, taken here.
    const taken = await occupiedPort();
    try {
      for (const flags of [
        ['--refresh', '2s'],
        ['--refresh-ms', '2000'],
      ]) {
        const result = await runSluice(['dashboard', ...flags, '--port', String(taken.port)], env);
        expectOneLine(result, 2, /is already in use/);
      }
    } finally {
      taken.close();
    }
  });

  it("the worker's metrics port taken: a ConfigError naming it", async () => {
    const taken = await occupiedPort();
    try {
      await expect(serveMetrics(new SluiceMetrics(), taken.port, '127.0.0.1')).rejects.toThrow(ConfigError);
      await expect(serveMetrics(new SluiceMetrics(), taken.port, '127.0.0.1')).rejects.toThrow(
        `metrics: port ${taken.port} on 127.0.0.1 is already in use`,
      );
    } finally {
      taken.close();
    }
  });

  it("a metrics host that is not this machine's: a ConfigError, not a driver error (outside review 127)", async () => {
    // 192.0.2.1 is TEST-NET-1: never an address of this machine, and no DNS look-up to wait for.
    const refused = serveMetrics(new SluiceMetrics(), 0, '192.0.2.1');
    await expect(refused).rejects.toThrow(ConfigError);
    await expect(refused).rejects.toThrow(/^metrics: cannot listen on 192\.0\.2\.1 port 0: /);
  });

  it('sluice worker with a metrics host it cannot listen on: exit 2, one line naming it', async () => {
    const env = { DATABASE_URL: db.url, SLUICE_SCHEMA: db.schema };
    const args = ['worker', '--tasks', `${FIXTURES}cli-tasks.mjs`, '--metrics-port', '0', '--metrics-host', '192.0.2.1'];
    expectOneLine(await runSluice(args, env), 2, /^sluice: metrics: cannot listen on 192\.0\.2\.1 port 0: .*EADDRNOTAVAIL/);
  });

  it.each(['worker', 'relay'])(
    'sluice %s --metrics-host without --metrics-port is refused (it served nothing)',
    async (command) => {
      const args = [
        command,
        ...(command === 'worker' ? ['--tasks', `${FIXTURES}cli-tasks.mjs`] : []),
        '--metrics-host',
        '0.0.0.0',
      ];
      expectOneLine(
        await runSluice(args, { DATABASE_URL: db.url, SLUICE_SCHEMA: db.schema }),
        2,
        /--metrics-host <host>' needs --metrics-port/,
      );
    },
  );
});
