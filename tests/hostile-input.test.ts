import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, migrate, Queue, Worker } from '../src/index.js';
import { quoteSchema } from '../src/db/identifiers.js';
import { databaseUrl, waitFor } from './helpers/database.js';

// Names and payloads that look like SQL are data: they travel as bound
// parameters, so they are stored verbatim and work. The schema, the one
// identifier in SQL text, is quoted once, so even a quote in it is harmless.
const SCHEMA = `t_q"uo'te;--${randomBytes(3).toString('hex')}`;
const QUEUE = `q'; DROP TABLE jobs; --`;
const TASK = `t"); DELETE FROM jobs; SELECT ('`;
const PAYLOAD = { sql: "'); DROP SCHEMA public CASCADE; --", dollar: '$1 $$ $tag$', backslash: '\\x00 \\u0000', emoji: '🦀' };

let url: string;
let pool: pg.Pool;
let queue: Queue;

beforeAll(async () => {
  url = databaseUrl();
  await migrate({ connectionString: url, schema: SCHEMA });
  pool = new pg.Pool({ connectionString: url, max: 2 });
  queue = new Queue({ pool, schema: SCHEMA });
});
afterAll(async () => {
  await pool.query(`DROP SCHEMA IF EXISTS ${quoteSchema(SCHEMA)} CASCADE`);
  await pool.end();
});

describe('hostile names and payloads', () => {
  it('a schema named with quotes and semicolons migrates, enqueues, notifies and runs jobs', async () => {
    const ran: unknown[] = [];
    // Poll once an hour: the job must arrive through NOTIFY on the channel "sluice:<that schema>".
    const worker = new Worker({
      connectionString: url,
      schema: SCHEMA,
      queues: [QUEUE],
      pollIntervalMs: 3_600_000,
      tasks: { [TASK]: async (payload) => void ran.push(payload) },
    });
    worker.on('error', () => {});
    // Emitted once the result is written (the handler's end comes before that).
    let written = 0;
    worker.on('job:complete', () => written++);
    await worker.start();
    try {
      const id = await queue.enqueue(TASK, PAYLOAD, { queue: QUEUE });
      const [many] = await queue.enqueueMany([{ task: TASK, queue: QUEUE, payload: PAYLOAD }]);
      const { rows } = await pool.query(`SELECT ${quoteSchema(SCHEMA)}.enqueue_job($1, $2, _task => $3) AS id`, [
        QUEUE,
        JSON.stringify(PAYLOAD),
        TASK,
      ]);
      await waitFor(() => ran.length === 3 && written === 3, 'the three jobs to run and their results to be written');
      expect(ran).toEqual([PAYLOAD, PAYLOAD, PAYLOAD]);
      for (const jobId of [id, many!, String(rows[0].id)]) {
        expect(await queue.getJob(jobId)).toMatchObject({ queue: QUEUE, task: TASK, payload: PAYLOAD, status: 'completed' });
      }
      const tables = await pool.query(
        `SELECT count(*)::int AS n FROM pg_tables WHERE schemaname = $1 AND tablename IN ('jobs', 'migrations')`,
        [SCHEMA],
      );
      expect(tables.rows[0].n).toBe(2); // both still there
    } finally {
      await worker.stop();
    }
  });

  // String.replace/replaceAll read $&, $$, $` and $' in a replacement string as
  // patterns: a schema spliced in that way names another schema. With an existing
  // schema of that other name, migrate() used to build everything there and
  // report success. Each name must get its own objects, and the decoy none.
  it.each([
    ['a$&b', 'a:SCHEMAb'], // $& is the match itself
    ["x$'y", undefined], // $' is the text after the match: the rest of the migration
    ['s$`t', undefined], // $` is the text before it
    ['d$1$', undefined], // not a dollar-quote tag ($1 is not a tag name)
    ['f%s%I%%', undefined], // format() patterns, for a function body that formats its text
  ])('a schema named %s migrates, enqueues and runs its jobs in that schema', async (name, wrongName) => {
    const tag = randomBytes(3).toString('hex');
    const schema = `${name}_${tag}`;
    const decoy = wrongName && `${wrongName}_${tag}`;
    const dropped = [schema, ...(decoy ? [decoy] : [])];
    try {
      if (decoy) await pool.query(`CREATE SCHEMA ${quoteSchema(decoy)}`);
      await migrate({ connectionString: url, schema });
      const objects = await pool.query<{ schema: string; n: number }>(
        `SELECT n.nspname AS schema, count(*)::int AS n FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = ANY($1) AND c.relname IN ('jobs', 'queues', 'leader', 'cron_schedules', 'jobs_history', 'audit_log')
         GROUP BY n.nspname`,
        [dropped],
      );
      expect(objects.rows).toEqual([{ schema, n: 6 }]);

      const ran: string[] = [];
      const q = new Queue({ pool, schema });
      const worker = new Worker({
        connectionString: url,
        schema,
        pollIntervalMs: 3_600_000,
        tasks: { t: async (payload: { n: string }) => void ran.push(payload.n) },
      });
      worker.on('error', () => {});
      await worker.start();
      try {
        const ids = [
          await q.enqueue('t', { n: 'insert' }),
          await q.enqueue('t', { n: 'keyed' }, { jobKey: 'k' }),
          String(
            (await pool.query(`SELECT ${quoteSchema(schema)}.enqueue_job('default', '{"task":"t","n":"sql"}') AS id`)).rows[0].id,
          ),
        ];
        await waitFor(() => ran.length === 3, 'the three jobs to run');
        expect(ran.sort()).toEqual(['insert', 'keyed', 'sql']);
        // A handler's result is written with the worker's next cycle, a moment after it returned.
        for (const id of ids) await waitFor(async () => (await q.getJob(id))?.status === 'completed', `job ${id} completed`);
        for (const id of ids) expect(await q.getJob(id)).toMatchObject({ status: 'completed' });
      } finally {
        await worker.stop();
      }
    } finally {
      for (const s of dropped) await pool.query(`DROP SCHEMA IF EXISTS ${quoteSchema(s)} CASCADE`);
    }
  });

  // $$ (or $tag$) in a name would end the dollar-quoted function bodies of the
  // migrations the schema is spliced into, so such names are refused, and
  // nothing is built anywhere (there used to be a decoy for "p$$q": "p$q").
  it('a schema named with a dollar-quote tag is refused before anything is built', async () => {
    const tag = randomBytes(3).toString('hex');
    const decoy = `p$q_${tag}`;
    await pool.query(`CREATE SCHEMA ${quoteSchema(decoy)}`);
    try {
      for (const schema of [`p$$q_${tag}`, `p$q$_${tag}`, `$é$_${tag}`]) {
        const refused = migrate({ connectionString: url, schema });
        await expect(refused).rejects.toThrow(ConfigError);
        await expect(refused).rejects.toThrow(/dollar-quote/);
        expect(() => new Queue({ schema })).toThrow(/dollar-quote/);
      }
      const built = await pool.query(
        `SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname LIKE $1`,
        [`%${tag}`],
      );
      expect(built.rows).toEqual([]);
    } finally {
      await pool.query(`DROP SCHEMA IF EXISTS ${quoteSchema(decoy)} CASCADE`);
    }
  });

  it('schema names that cannot work are refused up front', () => {
    // Reserved by Postgres for system schemas.
    expect(() => new Queue({ schema: 'pg_sluice' })).toThrow(/Postgres reserves/);
    // And the SQL standard's (outside review 248: migrate put the tables there).
    expect(() => new Queue({ schema: 'information_schema' })).toThrow(/system schema/);
    // A lone surrogate has no UTF-8 form: two such names would share one schema.
    expect(() => new Queue({ schema: 'a\ud800b' })).toThrow(/surrogate/);
    expect(() => new Queue({ schema: 'x'.repeat(51) })).toThrow(ConfigError);
    expect(() => new Queue({ schema: 'a\u0000b' })).toThrow(ConfigError);
    expect(() => new Worker({ connectionString: url, schema: '', tasks: { t: () => {} } })).toThrow(ConfigError);
    expect(() => new Worker({ connectionString: url, queues: ['ok', 'a\u0000'], tasks: { t: () => {} } })).toThrow(ConfigError);
    expect(() => new Worker({ connectionString: url, tasks: { ['x'.repeat(129)]: () => {} } })).toThrow(ConfigError);
  });

  it('SQL text in src/ splices in nothing but identifiers quoted once; every value is a $n parameter', () => {
    const srcDir = fileURLToPath(new URL('../src/', import.meta.url));
    const files = (dir: string): string[] =>
      readdirSync(dir).flatMap((f) => {
        const path = join(dir, f);
        return statSync(path).isDirectory() ? files(path) : path.endsWith('.ts') ? [path] : [];
      });
    // Allowed: quoteIdent(x) and quoteSchema(x); calls, with no or constant arguments, of SQL-building
    // helpers declared in src/ (jobColumns('c')); and names declared in the same
    // file as the quoted schema (`const s = quoteSchema(...)`) or as a constant SQL
    // fragment (`const x = '...'` or a template, itself built from these same parts).
    const sources = new Map(files(srcDir).map((f) => [f, readFileSync(f, 'utf8')]));
    const helpers = new Set(
      [...sources.values()].flatMap((src) =>
        [...src.matchAll(/(?:function (\w+)\(|const (\w+) = \()/g)].map((m) => m[1] ?? m[2]!),
      ),
    );
    const offenders: string[] = [];
    let statements = 0;
    for (const [file, source] of sources) {
      for (const [, body] of source.matchAll(/`((?:[^`\\]|\\.)*)`/gs)) {
        if (!/\b(SELECT|INSERT|UPDATE|DELETE|LISTEN|UNLISTEN|CREATE|DROP|ALTER|GRANT|TRUNCATE)\b/.test(body!)) continue;
        statements++;
        // A name declared in this file as the quoted schema or a constant fragment,
        // or a parameter whose type admits only string constants: (action: 'a' | 'b').
        const declared = (name: string) =>
          /^\w+$/.test(name) &&
          (new RegExp(`const ${name} = (quoteSchema\\(|['\`])`).test(source) ||
            new RegExp(`[(,]\\s*${name}: '[^']*'( \\| '[^']*')*( = '[^']*')?,?\\s*[,)]`).test(source));
        for (const [, expr] of body!.matchAll(/\$\{([^}]*)\}/g)) {
          if (/^(quoteIdent|quoteSchema)\([\w.]+\)$/.test(expr!)) continue;
          // A helper called with string constants ...
          const call = expr!.match(/^(\w+)\(('[^']*'(, '[^']*')*)?\)$/);
          if (call && helpers.has(call[1]!)) continue;
          // ... or with names of such constants.
          const named = expr!.match(/^(\w+)\((\w+(?:, \w+)*)\)$/);
          if (named && helpers.has(named[1]!) && named[2]!.split(', ').every(declared)) continue;
          if (!declared(expr!)) offenders.push(`${file}: \${${expr}}`);
        }
      }
    }
    expect(statements).toBeGreaterThan(10);
    expect(offenders).toEqual([]);
  });
});
