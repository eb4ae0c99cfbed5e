import { loginProblem } from '../db/connection.js';
import type { Driver } from '../db/driver.js';
import { quoteIdent, quoteSchema } from '../db/identifiers.js';
import { migrateStatements } from '../db/statements/migrate.js';
import { ConfigError, isInsufficientPrivilege, isNotMigrated, MigrationError } from '../errors.js';
import { migrationLag } from '../migrate.js';

/**
 * Why a worker could never run a job here, found at start: a server that refused
 * the login or has no such database, a schema never migrated, a role that may not
 * use the schema or lacks a privilege its claims and results need, or its
 * maintenance lease or schedules (`uses`) (outside reviews 156, 157 and 159: such a
 * worker logged refused statements and idled, or rescued nothing, for ever), a
 * schema behind this version's migrations (outside review 171: a package upgraded
 * before `sluice migrate` started, and its schedules failed every second).
 * Undefined when none of these holds. Anything else (Postgres out of reach) is
 * thrown: the worker reports it and keeps trying.
 */
export async function whyNoJobCanRun(
  db: Driver,
  schema: string,
  url: string | undefined,
  uses: { maintenance: boolean; schedules: boolean; deleting: boolean },
): Promise<Error | undefined> {
  let answer: { role: string; missing: string };
  try {
    const { rows } = await db.query<typeof answer>(migrateStatements(schema).workerPrivileges, [
      quoteSchema(schema),
      uses.maintenance,
      uses.schedules,
      uses.deleting,
    ]);
    answer = rows[0]!;
  } catch (err) {
    const refused = refusal(err, schema, url);
    if (refused) return refused;
    throw err;
  }
  // Before the privileges: a column a migration adds would be told as one the role lacks.
  const behind = await migrationsBehind(db, schema);
  if (behind) return behind;
  if (answer.missing === '') return undefined;
  // sluice_worker has no DELETE on jobs: completedJobs 'delete' needs it granted apart
  // (outside review 220: the worker started, every result write was refused, and each job ran again).
  const lacks = 'role "' + answer.role + '" lacks ' + answer.missing + ' in schema "' + schema + '"';
  if (!/\bDELETE on jobs\b/.test(answer.missing)) return new ConfigError(lacks + ': ' + GRANT);
  const deleting =
    `completedJobs 'delete' deletes completed jobs' rows, which sluice_worker may not: ` +
    `GRANT DELETE ON ${quoteSchema(schema)}.jobs TO ${quoteIdent(answer.role)}, or keep completed jobs (the default)`;
  return new ConfigError(lacks + ': ' + (answer.missing === 'DELETE on jobs' ? deleting : GRANT + '; ' + deleting));
}

/** A MigrationError when the schema lacks migrations this version of Sluice has (see migrationLag). */
async function migrationsBehind(db: Driver, schema: string): Promise<MigrationError | undefined> {
  const lag = await migrationLag(db, schema);
  return lag === undefined
    ? undefined
    : new MigrationError(`${lag}: run \`sluice migrate\` (or call migrate()) against this database first`);
}

const GRANT = "grant it sluice_worker (sql/roles.sql), or run the worker as the schema's owner";

function refusal(err: unknown, schema: string, url: string | undefined): Error | undefined {
  const refused = loginProblem(err, url);
  if (refused) return new ConfigError(refused, { cause: err });
  if (isInsufficientPrivilege(err)) return new ConfigError((err as Error).message + ': ' + GRANT, { cause: err });
  if (isNotMigrated(err)) {
    return new MigrationError(
      'no Sluice tables in schema "' +
        schema +
        '": run `sluice migrate` (or call migrate()) against this database first, or pass the right schema',
      { cause: err },
    );
  }
  return undefined;
}
