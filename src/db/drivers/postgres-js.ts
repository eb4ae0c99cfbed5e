import type { Sql, Options, TransactionSql } from 'postgres';
import { ConfigError } from '../../errors.js';
import { quoteIdent } from '../identifiers.js';
import type { Driver, ListenHandlers, Listening } from '../driver.js';
import type { Queryable } from '../executor.js';

export interface PostgresJsDriverOptions {
  connectionString?: string;
  /** The caller's postgres.js instance; Sluice never ends it. */
  sql?: PostgresJsSql;
  /** LISTEN through this URL instead (e.g. when `connectionString` goes through a transaction-mode pooler). */
  listenConnectionString?: string;
  max: number;
  applicationName: string;
}

/**
 * The part of a postgres.js `sql` instance Sluice uses, spelled out so that
 * Sluice's types do not require postgres.js to be installed.
 */
export interface PostgresJsSql {
  unsafe(text: string, values?: any[]): PromiseLike<readonly any[]>;
  end(options?: { timeout?: number }): Promise<void>;
  readonly options: object;
}

/** A statement on postgres.js (the instance, or a transaction of it), returning `{ rows }`. */
async function run(sql: Sql | TransactionSql, text: string, values: unknown[] = []): Promise<{ rows: any[] }> {
  // postgres.js types an array parameter by its first element (`[true]` is sent
  // as bool, not bool[]), which then fails the statement's `$n::bool[]` cast.
  // Type 0 lets the server take the type from the cast instead.
  const params = values.map((v) => (Array.isArray(v) ? sql.typed(v as never, 0) : v));
  const result = await sql.unsafe(text, params as never[]);
  return { rows: [...result] };
}

type Postgres = (url?: string | Options<{}>, options?: Options<{}>) => Sql;

/** postgres.js is an optional peer dependency: load it only when a worker asks for it. */
async function loadPostgres(): Promise<Postgres> {
  try {
    return (await import('postgres')).default as unknown as Postgres;
  } catch (err) {
    throw new ConfigError('driver "postgres.js" needs the postgres package: npm i postgres', { cause: err });
  }
}

/**
 * The worker's driver on postgres.js. postgres.js prepares every statement on
 * its own, so statement names are not needed.
 *
 * LISTEN does not use `sql.listen()`: that re-LISTENs after a reconnect on its
 * own but silently gives up when the reconnect fails, and a first LISTEN that
 * failed poisons the channel for later attempts. A dedicated one-connection
 * instance reports every loss instead, and the notifier's own retry loop (the
 * same one the `pg` driver uses) takes over.
 */
export async function postgresJsDriver(options: PostgresJsDriverOptions): Promise<Driver> {
  const postgres = await loadPostgres();
  const owned = !options.sql;
  const sql: Sql = (options.sql as unknown as Sql | undefined) ?? postgres(options.connectionString!, {
    max: options.max,
    connection: { application_name: options.applicationName },
    onnotice: () => {},
  });

  function listenInstance(onnotify: (channel: string, payload: string) => void, onclose: () => void): Sql {
    // onnotify is read by postgres.js (its own listen() uses it) but missing from its types.
    const settings = {
      max: 1,
      idle_timeout: 0,
      max_lifetime: null,
      fetch_types: false,
      connection: { application_name: `${options.applicationName}-listen` },
      onnotice: () => {},
      onnotify,
      onclose,
    } as Options<{}>;
    const url = options.listenConnectionString ?? options.connectionString;
    // Without a URL, reuse the caller's parsed options (what postgres.js's own listen() does).
    return url ? postgres(url, settings) : postgres({ ...(sql.options as unknown as Options<{}>), ...settings });
  }

  return {
    query: (text: string, values?: unknown[]) => run(sql, text, values),

    transaction: <T>(fn: (tx: Queryable) => Promise<T>) =>
      sql.begin((tx) => fn({ query: (text, values) => run(tx, text, values) })) as Promise<T>,

    async listen(channel: string, handlers: ListenHandlers): Promise<Listening> {
      let open = true;
      const stop = () => {
        open = false;
        void listener.end({ timeout: 0 }).catch(() => {});
      };
      const listener = listenInstance(
        (c, payload) => {
          if (open && c === channel) handlers.notification(payload);
        },
        () => {
          if (!open) return;
          stop();
          handlers.lost(new Error('LISTEN connection closed'));
        },
      );
      try {
        await listener.unsafe(`LISTEN ${quoteIdent(channel)}`);
      } catch (err) {
        stop();
        throw err;
      }
      return {
        async close() {
          if (!open) return;
          open = false;
          await listener.end({ timeout: 1 }).catch(() => {});
        },
      };
    },

    async end() {
      if (owned) await sql.end({ timeout: 5 });
    },
  };
}
