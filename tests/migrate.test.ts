import { afterAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { randomBytes } from 'node:crypto';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { migrate, loadMigrations } from '../src/migrate.js';
import { MigrationError, ConfigError, DatabaseError } from '../src/errors.js';
import { databaseUrl } from './helpers/database.js';

const url = databaseUrl();
const pool = new pg.Pool({ connectionString: url });
const schemas: string[] = [];
const fresh = (tag: string) => {
  const s = `t_mig_${tag}_${randomBytes(3).toString('hex')}`;
  schemas.push(s);
  return s;
};

afterAll(async () => {
  for (const s of schemas) await pool.query(`DROP SCHEMA IF EXISTS "${s.replace(/"/g, '""')}" CASCADE`);
  await pool.end();
});

describe('migrate', () => {
  it('applies every migration once and records the version', async () => {
    const schema = fresh('once');
    const all = await loadMigrations();
    const first = await migrate({ connectionString: url, schema });
    expect(first.applied.map((m) => m.version)).toEqual(all.map((m) => m.version));
    const again = await migrate({ connectionString: url, schema });
    expect(again.applied).toEqual([]);
    expect(again.version).toBe(all.at(-1)!.version);
    const { rows } = await pool.query(`SELECT version FROM "${schema}".migrations ORDER BY version`);
    expect(rows.map((r) => r.version)).toEqual(all.map((m) => m.version));
  });

  it('0027 brings rows stored before 0026 with a run_at outside the years 1-9999 within them, so their queue runs again', async () => {
    // Outside review 65: 0026's NOT VALID constraint let such a row stay but refused
    // every new version of it, so every claim of its queue failed.
    const schema = fresh('range');
    await migrate({ connectionString: url, schema });
    const s = `"${schema}"`;
    // Back to 0026 with rows written before it (what 0027 creates undone, the constraint lifted).
    await pool.query(`
      DROP TRIGGER jobs_run_at_range ON ${s}.jobs; DROP FUNCTION ${s}.refuse_run_at_out_of_range();
      DROP TRIGGER outbox_refuse_row ON ${s}.outbox; DROP FUNCTION ${s}.refuse_outbox_row();
      DROP FUNCTION ${s}.outbox_message_problem(text, jsonb);
      ALTER FUNCTION ${s}.outbox_entries_problem(text, jsonb) RENAME TO outbox_message_problem;
      DELETE FROM ${s}.migrations WHERE version = 27;
      ALTER TABLE ${s}.jobs DROP CONSTRAINT jobs_run_at_years_1_to_9999;
      INSERT INTO ${s}.jobs (task, run_at) VALUES ('early', '4000-01-01 BC'), ('late', '294276-01-01'), ('fine', now());
      ALTER TABLE ${s}.jobs ADD CONSTRAINT jobs_run_at_years_1_to_9999
        CHECK (run_at >= '0001-01-01 00:00:00+00' AND run_at < '10000-01-01 00:00:00+00') NOT VALID;`);
    const claim = `UPDATE ${s}.jobs SET status = 'processing', attempts = attempts + 1 WHERE status = 'pending' RETURNING task`;
    await expect(pool.query(claim)).rejects.toMatchObject({ code: '23514' });
    const result = await migrate({ connectionString: url, schema });
    expect(result.applied.map((m) => m.version)).toEqual([27]);
    const { rows } = await pool.query(
      `SELECT task, to_char(run_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') AS at FROM ${s}.jobs WHERE task <> 'fine' ORDER BY task`,
    );
    expect(rows).toEqual([
      { task: 'early', at: '0001-01-01 00:00:00.000000' },
      { task: 'late', at: '9999-12-31 23:59:59.999999' },
    ]);
    expect((await pool.query(claim)).rows.map((r) => r.task).sort()).toEqual(['early', 'fine', 'late']);
  });

  it('migrates as a schema owner that is not a superuser, who sets the payload limit (outside review 118)', async () => {
    // Postgres 15 let only a superuser pin sluice.max_payload_bytes on a function: 0011 failed.
    const schema = fresh('owner');
    const role = `t_mig_owner_${randomBytes(3).toString('hex')}`;
    const database = new URL(url).pathname.slice(1);
    await pool.query(`CREATE ROLE ${role} LOGIN PASSWORD 'owner'`);
    await pool.query(`GRANT CREATE ON DATABASE "${database}" TO ${role}`);
    const asOwner = new URL(url);
    asOwner.username = role;
    asOwner.password = 'owner';
    const owner = new pg.Pool({ connectionString: asOwner.toString(), max: 1 });
    try {
      await migrate({ connectionString: asOwner.toString(), schema });
      const limit = async () =>
        (await pool.query(`SELECT pg_get_functiondef('"${schema}".check_payload_limit()'::regprocedure) AS def`)).rows[0]
          .def as string;
      expect(await limit()).toMatch(/_limit CONSTANT bigint := 1048576;/);
      expect((await owner.query(`SELECT "${schema}".set_max_payload_bytes(4194304) AS n`)).rows[0].n).toBe('4194304');
      expect(await limit()).toMatch(/_limit CONSTANT bigint := 4194304;/);
      await expect(owner.query(`SELECT "${schema}".set_max_payload_bytes(100)`)).rejects.toMatchObject({ code: '22023' });
    } finally {
      await owner.end();
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await pool.query(`REVOKE CREATE ON DATABASE "${database}" FROM ${role}`);
      await pool.query(`DROP ROLE ${role}`);
    }
  });

  it('a role that may read an up-to-date schema migrates it as a no-op; one that may not is told who may (outside review 182)', async () => {
    const schema = fresh('readonly');
    await migrate({ connectionString: url, schema });
    const role = `t_mig_reader_${randomBytes(3).toString('hex')}`;
    await pool.query(`CREATE ROLE ${role} LOGIN PASSWORD 'reader'`);
    const asReader = new URL(url);
    asReader.username = role;
    asReader.password = 'reader';
    try {
      // No CREATE on the database: CREATE SCHEMA IF NOT EXISTS was refused all the same.
      const refused = await migrate({ connectionString: asReader.toString(), schema }).catch((err: Error) => err);
      expect(refused).toBeInstanceOf(MigrationError);
      const { rows } = await pool.query<{ owner: string }>('SELECT current_user AS owner');
      expect((refused as Error).message).toMatch(
        /^migration setup failed: permission denied .*migrate runs as the schema's owner, role /,
      );
      expect((refused as Error).message).toContain(`role ${JSON.stringify(rows[0]!.owner)})`);
      await pool.query(`GRANT USAGE ON SCHEMA "${schema}" TO ${role}`);
      await pool.query(`GRANT SELECT ON "${schema}".migrations TO ${role}`);
      const result = await migrate({ connectionString: asReader.toString(), schema });
      expect(result.applied).toEqual([]);
    } finally {
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await pool.query(`DROP ROLE ${role}`);
    }
  });

  it('0037 keeps a payload limit pinned on the function before it, and drops the pin', async () => {
    const schema = fresh('pinned');
    await migrate({ connectionString: url, schema });
    // As before 0037: the limit pinned as a parameter (a superuser may), and 0037 not applied.
    await pool.query(`DROP FUNCTION "${schema}".set_max_payload_bytes(bigint)`);
    await pool.query(`ALTER FUNCTION "${schema}".check_payload_limit() SET sluice.max_payload_bytes = '2000000'`);
    await pool.query(`DELETE FROM "${schema}".migrations WHERE version = 37`);
    expect((await migrate({ connectionString: url, schema })).applied.map((m) => m.version)).toEqual([37]);
    const { rows } = await pool.query(
      `SELECT proconfig, pg_get_functiondef(oid) AS def FROM pg_proc WHERE oid = '"${schema}".check_payload_limit()'::regprocedure`,
    );
    expect(rows[0].def).toMatch(/_limit CONSTANT bigint := 2000000;/);
    expect(rows[0].proconfig).toEqual(['search_path=pg_catalog, pg_temp']);
  });

  it('is safe when many processes migrate the same schema at once', async () => {
    const schema = fresh('race');
    const results = await Promise.all(Array.from({ length: 6 }, () => migrate({ connectionString: url, schema })));
    const appliedCounts = results.map((r) => r.applied.length);
    // Exactly one caller did the work; the others waited on the lock and found nothing to do.
    expect(appliedCounts.filter((n) => n > 0)).toHaveLength(1);
    expect(new Set(results.map((r) => r.version)).size).toBe(1);
  });

  it("names the clash in a schema that holds another tool's tables, and leaves them as they were (outside review 209)", async () => {
    for (const [table, ddl] of [
      ['migrations', '(id serial PRIMARY KEY, filename text)'],
      ['jobs', '(id serial PRIMARY KEY, what text)'],
    ] as const) {
      const schema = fresh(`clash_${table}`);
      await pool.query(`CREATE SCHEMA "${schema}"; CREATE TABLE "${schema}".${table} ${ddl}`);
      await pool.query(`INSERT INTO "${schema}".${table} DEFAULT VALUES`);
      const refused = await migrate({ connectionString: url, schema }).catch((err: Error) => err);
      expect(refused, table).toBeInstanceOf(MigrationError);
      expect((refused as Error).message, table).toContain(`schema "${schema}" holds tables of another tool`);
      const { rows } = await pool.query(
        `SELECT (SELECT count(*)::int FROM "${schema}".${table}) AS n, (SELECT count(*)::int FROM pg_tables WHERE schemaname = $1) AS tables`,
        [schema],
      );
      expect(rows[0], table).toEqual({ n: 1, tables: 1 });
    }
  });

  it('works with a schema name that needs quoting', async () => {
    const schema = fresh(`we"ird; drop`);
    await migrate({ connectionString: url, schema });
    const { rows } = await pool.query('SELECT count(*)::int AS n FROM pg_namespace WHERE nspname = $1', [schema]);
    expect(rows[0].n).toBe(1);
  });

  it('takes a schema name whose line break or comment end would escape a comment, and runs nothing of it (outside review 171)', async () => {
    const canary = `c${randomBytes(3).toString('hex')}`;
    await pool.query(`CREATE TABLE public.${canary} (i int)`);
    try {
      for (const tag of ['\nDROP TABLE public.', '\r\nDROP TABLE public.', '*/DROP TABLE public.']) {
        const schema = fresh(`x${tag}${canary};--`);
        const { version } = await migrate({ connectionString: url, schema });
        expect(version).toBe((await loadMigrations()).at(-1)!.version);
        const { rows } = await pool.query('SELECT count(*)::int AS n FROM pg_namespace WHERE nspname = $1', [schema]);
        expect(rows[0].n).toBe(1);
      }
      expect((await pool.query(`SELECT to_regclass('public.${canary}') IS NOT NULL AS ok`)).rows[0].ok).toBe(true);
    } finally {
      await pool.query(`DROP TABLE IF EXISTS public.${canary}`);
    }
  });

  it('refuses a migration that names the schema placeholder in a comment', async () => {
    for (const text of ['-- on :SCHEMA\nSELECT 1', 'SELECT 1 /* of\n:SCHEMA */']) {
      const dir = await mkdtemp(join(tmpdir(), 'sluice-mig-'));
      await writeFile(join(dir, '0001_a.sql'), text);
      await expect(loadMigrations(dir)).rejects.toThrow(/0001_a.sql names the schema placeholder in a comment/);
    }
  });

  it('refuses a database that is newer than this code', async () => {
    const schema = fresh('newer');
    await migrate({ connectionString: url, schema });
    await pool.query(`INSERT INTO "${schema}".migrations (version, name) VALUES (9999, 'future')`);
    await expect(migrate({ connectionString: url, schema })).rejects.toBeInstanceOf(MigrationError);
  });

  it('refuses two migration files with the same version', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'sluice-mig-'));
    await writeFile(join(dir, '0001_a.sql'), 'SELECT 1');
    await writeFile(join(dir, '0001_b.sql'), 'SELECT 1');
    await expect(loadMigrations(dir)).rejects.toThrow(/share version 0001/);
  });

  it('rejects bad options with a typed error', async () => {
    await expect(migrate({ schema: 'x' })).rejects.toBeInstanceOf(ConfigError);
    // A misspelt schema must not migrate the default one (outside review 43).
    await expect(migrate({ connectionString: 'postgres://nowhere.invalid/x', schmea: 'x' } as never)).rejects.toThrow(
      /migrate: unknown option "schmea"/,
    );
    await expect(migrate({ connectionString: url, schema: '' })).rejects.toBeInstanceOf(ConfigError);
    await expect(migrate({ connectionString: url, schema: 'x'.repeat(80) })).rejects.toBeInstanceOf(ConfigError);
  });

  it("rejects a database that does not exist with a DatabaseError carrying Postgres's SQLSTATE, not pg's own error", async () => {
    const missing = new URL(url);
    missing.pathname = `/no_such_db_${randomBytes(3).toString('hex')}`;
    const error: unknown = await migrate({ connectionString: missing.toString(), schema: fresh('nodb') }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(DatabaseError);
    expect(error).toMatchObject({ code: 'DATABASE', sqlState: '3D000' });
    expect((error as Error).message).toMatch(/^migrate could not begin: database "no_such_db_\w+" does not exist/);
  });
});
