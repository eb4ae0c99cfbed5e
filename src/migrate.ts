import { readdir, readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { quoteSchema } from './db/identifiers.js';
import { migrateStatements } from './db/statements/migrate.js';
import { connectionError, hasConnection, resolveDriverName, type DriverConnectionOptions } from './db/connection.js';
import { openDriver } from './db/drivers/open.js';
import { rows, type Queryable } from './db/executor.js';
import { ConfigError, MigrationError, isConnectionFailure, isInsufficientPrivilege, wrapDatabaseError } from './errors.js';
import { checks } from './validate.js';

const { schemaOption, rejectUnknownKeys } = checks(ConfigError);

const MIGRATIONS_DIR = fileURLToPath(new URL('../sql/migrations/', import.meta.url));

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

/** Where to migrate: `connectionString`, your `pg` Pool, or your postgres.js `sql`; `schema`; `driver`. */
export type MigrateOptions = DriverConnectionOptions;

export interface MigrationResult {
  schema: string;
  /** Migrations applied by this call, in order (empty when already up to date). */
  applied: { version: number; name: string }[];
  /** The schema's version afterwards. */
  version: number;
}

const MIGRATION_FILE = /^\d{4}_[\w-]+\.sql$/;

let newest: Promise<number> | undefined;

/** The version of the newest migration this version of Sluice has, from the file names (read once). */
export function newestMigration(): Promise<number> {
  newest ??= readdir(MIGRATIONS_DIR).then((files) =>
    Math.max(0, ...files.filter((f) => MIGRATION_FILE.test(f)).map((f) => Number(f.slice(0, 4)))),
  );
  return newest;
}

/**
 * "schema … is at migration A, and this version of Sluice needs N" when the schema
 * lacks migrations this version has; undefined when it has them all (or more: a
 * rolling upgrade migrates before the last old workers stop), and for a role that
 * may not read the migrations table (sql/roles.sql revokes it, outside review 172).
 */
export async function migrationLag(db: Queryable, schema: string): Promise<string | undefined> {
  let applied: number;
  try {
    const [row] = await rows<{ version: number | null }>(db, migrateStatements(schema).newestApplied);
    applied = row?.version ?? 0;
  } catch (err) {
    if (isInsufficientPrivilege(err)) return undefined;
    throw err;
  }
  const needed = await newestMigration();
  if (applied >= needed) return undefined;
  return `schema ${JSON.stringify(schema)} is at migration ${applied}, and this version of Sluice needs ${needed}`;
}

/** Reads sql/migrations/NNNN_name.sql in version order. */
export async function loadMigrations(dir = MIGRATIONS_DIR): Promise<Migration[]> {
  const files = (await readdir(dir)).filter((f) => MIGRATION_FILE.test(f)).sort();
  // Two files with one number would both claim the same row in the migrations table.
  const seen = new Map<string, string>();
  for (const file of files) {
    const other = seen.get(file.slice(0, 4));
    if (other) throw new MigrationError(`two migrations share version ${file.slice(0, 4)}: ${other} and ${file}`);
    seen.set(file.slice(0, 4), file);
  }
  return Promise.all(
    files.map(async (file) => {
      const sql = await readFile(`${dir}/${file}`, 'utf8');
      // The quoted name may hold a line break, which ends a -- comment: the rest of
      // the name would run as SQL (outside review 171: a schema named
      // 'x\nDROP TABLE public.users;--' dropped the table).
      if (/--[^\n]*:SCHEMA/.test(sql) || /\/\*(?:(?!\*\/)[\s\S])*:SCHEMA/.test(sql)) {
        throw new MigrationError(`migration ${file} names the schema placeholder in a comment`);
      }
      return { version: Number(file.slice(0, 4)), name: file.slice(5, -4), sql };
    }),
  );
}

/**
 * Brings the schema up to the newest migration. Safe to run from many processes
 * at once: everything happens in one transaction behind an advisory lock keyed on
 * the schema, so a second caller waits, then finds nothing left to do. A failing
 * migration rolls the whole call back.
 *
 * @example
 *   await migrate({ connectionString: process.env.DATABASE_URL });
 *   await migrate({ sql }); // your postgres.js instance: its settings, a connection of migrate's own
 */
const MIGRATE_KEYS = new Set(['connectionString', 'pool', 'sql', 'driver', 'schema']);

export async function migrate(options: MigrateOptions): Promise<MigrationResult> {
  if (!options || typeof options !== 'object') throw new ConfigError('migrate: options object required');
  // A misspelt `schema` would otherwise migrate the default schema (outside review 43).
  rejectUnknownKeys(options, MIGRATE_KEYS, 'migrate');
  const driverName = resolveDriverName(options, 'migrate');
  if (!hasConnection(options)) throw new ConfigError('migrate: give connectionString, pool or sql');
  const schema = schemaOption(options.schema);
  const migrations = await loadMigrations();
  const { connectionString, pool, sql } = options;
  const driver = await openDriver(driverName, { connectionString, pool, sql }, 1, 'sluice-migrate');
  // Whether the transaction began: a connection failure before that is "cannot
  // reach Postgres", one after it interrupted the migration.
  let began = false;
  try {
    return await driver.transaction((tx) => {
      began = true;
      return migrateWith(tx, schema, migrations);
    });
  } catch (err) {
    if (!began && isConnectionFailure(err)) throw connectionError(err, connectionString);
    // A login refused or a database that does not exist came out as pg's own error (outside review 101).
    throw wrapDatabaseError(err, began ? 'migrate failed' : 'migrate could not begin');
  } finally {
    await driver.end();
  }
}

/** Runs inside the driver's transaction, which rolls everything back when this throws. */
async function migrateWith(tx: Queryable, schema: string, migrations: Migration[]): Promise<MigrationResult> {
  const s = quoteSchema(schema);
  const q = migrateStatements(schema);
  const applied: MigrationResult['applied'] = [];
  let current: Migration | undefined;
  let owner: string | undefined;
  try {
    await tx.query(q.lock, [`sluice:migrate:${schema}`]);
    // CREATE ... IF NOT EXISTS still asks for CREATE on the database and the schema:
    // a role without it, running migrate on a schema already up to date, was refused
    // with "permission denied for database" (outside review 182).
    const [found] = await rows<{ installed: boolean; owner: string | null }>(tx, q.installed, [schema]);
    owner = found?.owner ?? undefined;
    if (found?.installed !== true) {
      await tx.query(q.createSchema);
      await tx.query(q.createMigrationsTable);
    }
    const done = new Set((await rows<{ version: number }>(tx, q.appliedVersions)).map((r) => r.version));
    const newest = migrations.at(-1)?.version ?? 0;
    const unknown = [...done].filter((v) => v > newest);
    if (unknown.length > 0) {
      throw new MigrationError(
        `schema ${JSON.stringify(schema)} has migration ${Math.max(...unknown)}, newer than this version of Sluice knows (${newest}); upgrade Sluice`,
      );
    }
    for (const migration of migrations) {
      if (done.has(migration.version)) continue;
      current = migration;
      // No parameters: the simple query protocol (both drivers use it then) runs a file of many statements.
      // A replacer function, not the string: a string replacement reads $&, $$, $`
      // and $' as patterns, and a schema named with them would name another schema.
      await tx.query(migration.sql.replaceAll(':SCHEMA', () => s));
      await tx.query(q.recordVersion, [migration.version, migration.name]);
      applied.push({ version: migration.version, name: migration.name });
    }
    return { schema, applied, version: Math.max(newest, ...done) };
  } catch (err) {
    if (err instanceof MigrationError) throw err;
    if (isConnectionFailure(err)) throw new MigrationError(`migration interrupted: ${(err as Error).message}`, { cause: err });
    const where = current ? `migration ${current.version}_${current.name}` : 'migration setup';
    // Named: "the schema's owner" alone left the reader to look it up (outside review 209).
    const hint = isInsufficientPrivilege(err)
      ? owner === undefined
        ? ' (migrate runs as the role that will own the schema, which needs CREATE on the database)'
        : ` (migrate runs as the schema's owner, role ${JSON.stringify(owner)})`
      : clashes(err, current)
        ? ` (schema ${JSON.stringify(schema)} holds tables of another tool: give Sluice a schema of its own, --schema or the schema option)`
        : '';
    throw new MigrationError(`${where} failed: ${(err as Error).message}${hint}`, { cause: err });
  }
}

/**
 * A table a migration creates already there (42P07), or a `migrations` table
 * without Sluice's columns before any migration ran (42703): the schema holds
 * another tool's tables (outside review 209: the bare Postgres error).
 */
function clashes(err: unknown, current: Migration | undefined): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === '42P07' || (code === '42703' && current === undefined);
}
