import { afterAll, beforeAll, expect, it } from 'vitest';
import { ConnectionError, migrate, NotSentError, Queue } from '../../src/index.js';
import type { EmbeddedPostgres } from '../../src/dev/embedded-postgres.js';
import { startPgBouncer, type PgBouncer } from '../helpers/pgbouncer.js';
import { startPrivatePostgres } from '../helpers/private-postgres.js';
import { FIXTURES, spawnCli, type CliProcess } from '../helpers/cli.js';
import { waitFor } from '../helpers/database.js';

// Run by `npm run test:pgbouncer`. Postgres goes down here, so it is a private server.
let server: EmbeddedPostgres;
let bouncer: PgBouncer;

beforeAll(async () => {
  server = await startPrivatePostgres('bouncer-down');
  await migrate({ connectionString: server.url });
  bouncer = await startPgBouncer(server.url);
}, 60_000);
afterAll(async () => {
  await bouncer?.stop();
  await server?.stop();
});

it('an enqueue PgBouncer could not hand to Postgres is a NotSentError: the job does not exist (outside review 131)', async () => {
  const queue = new Queue({
    connectionString: bouncer.url,
    preparedStatements: bouncer.tracksPreparedStatements,
    statementTimeoutMs: 3_000,
  });
  try {
    await queue.enqueue('t'); // the Queue's connection to PgBouncer is open from here on
    const refusals: unknown[] = [];
    await server.restart(async () => {
      for (let i = 0; i < 3; i++) refusals.push(await queue.enqueue('t').catch((err: unknown) => err));
    });
    // The first waits for PgBouncer's login to the server and times out (it may have run, for
    // all the Queue knows); the next are answered by PgBouncer itself ("server login has been
    // failing"): they never reached Postgres.
    expect(refusals.every((e) => e instanceof ConnectionError)).toBe(true);
    const byPgBouncer = refusals.filter((e) =>
      /server login has been failing|pgbouncer cannot connect/.test((e as Error).message),
    );
    expect(byPgBouncer.length).toBeGreaterThan(0);
    for (const e of byPgBouncer) {
      expect(e).toBeInstanceOf(NotSentError);
      expect((e as Error).message).toMatch(/nothing was sent, so the job was not enqueued$/);
    }
  } finally {
    await queue.close();
  }
});

it('sluice worker started while PgBouncer cannot reach Postgres waits for it, and one PgBouncer refuses the login of exits 1 (outside review 176)', async () => {
  const args = ['worker', '--tasks', `${FIXTURES}cli-tasks.mjs`, '--no-listen', '--no-prepared-statements'];
  // PgBouncer takes the login itself and fails the first statement ("server login has been
  // failing", 08P01): the worker exited 1 where a Postgres down is waited for.
  let cli: CliProcess | undefined;
  try {
    await server.restart(async () => {
      cli = spawnCli([...args, '--database-url', bouncer.url]);
      await waitFor(() => cli!.stderr().includes('waiting for it'), 'the worker to wait for Postgres', 30_000);
    });
    await waitFor(() => cli!.stderr().includes('reached Postgres after'), 'the worker to reach Postgres', 30_000);
    cli!.child.kill('SIGTERM');
    expect((await cli!.exited).code).toBe(0);
  } finally {
    cli?.child.kill('SIGKILL');
  }
  // A user PgBouncer does not know: refused with the same code, for good.
  const stranger = new URL(bouncer.url);
  stranger.username = 'no_such_user_here';
  const refused = await spawnCli([...args, '--database-url', stranger.toString()]).exited;
  expect(refused.code).toBe(1);
  expect(refused.stderr).toMatch(/authentication failed.*the pooler's auth_file/);
});
