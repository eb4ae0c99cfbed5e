import pg from 'pg';
import { openPool } from '../connection.js';
import { quoteIdent } from '../identifiers.js';
import { LISTEN_APPLICATION_NAME, type Driver, type ListenHandlers, type Listening } from '../driver.js';
import type { Queryable } from '../executor.js';

export interface PgDriverOptions {
  connectionString?: string;
  pool?: pg.Pool;
  /** LISTEN through this URL instead (e.g. when the pool goes through a transaction-mode pooler). */
  listenConnectionString?: string;
  /** Pool size when the driver makes the pool. */
  max: number;
  applicationName: string;
}

/** A Driver on node-postgres, and the pool it runs on (yours, or one it made). */
export interface PgDriver extends Driver {
  readonly pool: pg.Pool;
}

/**
 * The driver on node-postgres: a small pool (or the caller's, never ended here),
 * plus one client held for LISTEN.
 */
export function pgDriver(options: PgDriverOptions): PgDriver {
  const handle = openPool(options, options.max, options.applicationName);
  const pool = handle.pool;

  async function connectListener(): Promise<{ client: pg.ClientBase; release(err?: Error): void }> {
    const url = options.listenConnectionString ?? options.connectionString;
    if (url) {
      const client = new pg.Client({ connectionString: url, application_name: LISTEN_APPLICATION_NAME });
      client.on('error', () => {});
      await client.connect();
      return { client, release: () => void client.end().catch(() => {}) };
    }
    const client = await pool.connect();
    return { client, release: (err) => client.release(err ?? true) };
  }

  return {
    pool,

    query: (text: string, values?: unknown[], name?: string) =>
      pool.query(name ? { name, text, values } : { text, values }) as Promise<{ rows: any[] }>,

    async transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T> {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        const result = await fn(client);
        await client.query('COMMIT');
        client.release();
        return result;
      } catch (err) {
        // A failed ROLLBACK means the connection is broken: destroy it rather than reuse it.
        const broken = await client.query('ROLLBACK').then(() => undefined, (e: Error) => e);
        client.release(broken ?? undefined);
        throw err;
      }
    },

    async listen(channel: string, handlers: ListenHandlers): Promise<Listening> {
      const held = await connectListener();
      const { client } = held;
      let open = true;
      const lost = (err: Error) => {
        if (!open) return;
        open = false;
        client.removeAllListeners('notification');
        held.release(err);
        handlers.lost(err);
      };
      client.on('notification', (msg) => {
        if (msg.channel === channel) handlers.notification(msg.payload);
      });
      client.on('error', lost);
      client.on('end', () => lost(new Error('LISTEN connection ended')));
      try {
        await client.query(`LISTEN ${quoteIdent(channel)}`);
      } catch (err) {
        open = false;
        held.release(err as Error);
        throw err;
      }
      return {
        async close() {
          if (!open) return;
          open = false;
          client.removeAllListeners('notification');
          try {
            await client.query(`UNLISTEN ${quoteIdent(channel)}`);
            held.release();
          } catch (err) {
            held.release(err as Error);
          }
        },
      };
    },

    end: () => handle.end(),
  };
}
