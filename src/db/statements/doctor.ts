import { quoteSchema } from '../identifiers.js';
import { perSchema } from './per-schema.js';
import { alive } from './workers.js';

/**
 * What `sluice doctor` reads. Catalog and statistics views take the schema as a
 * `$1` value; only the queries of Sluice's own tables splice in the quoted schema.
 * Durations come back in milliseconds, sizes in bytes.
 */
export interface DoctorStatements {
  /** Whether the schema has Sluice's jobs table ($1: the quoted schema + '.jobs'). */
  readonly installed: string;
  readonly tables: string;
  readonly lockWaits: string;
  readonly idleInTransaction: string;
  readonly oldestSnapshots: string;
  readonly oldestWriteTransaction: string;
  readonly preparedTransactions: string;
  readonly replicationSlots: string;
  readonly notifyQueue: string;
  readonly connections: string;
  readonly indexes: string;
  readonly backlog: string;
  readonly stuck: string;
  readonly maintenance: string;
  readonly autovacuum: string;
}

const MS = (expr: string) => `(extract(epoch FROM ${expr}) * 1000)::float8`;

/** The doctor's statements for one schema, built once per schema. */
export const doctorStatements = perSchema((schema: string): DoctorStatements => {
  const s = quoteSchema(schema);
  return {
    installed: 'SELECT to_regclass($1) IS NOT NULL AS installed',

    // Every table in the schema (history partitions included), with the counters
    // autovacuum itself decides on.
    tables: `SELECT c.relname AS table, coalesce(st.n_live_tup, 0)::float8 AS live, coalesce(st.n_dead_tup, 0)::float8 AS dead,
        st.last_vacuum, st.last_autovacuum, st.last_autoanalyze,
        coalesce(st.autovacuum_count, 0)::int AS autovacuum_count,
        pg_total_relation_size(c.oid)::float8 AS total_bytes, c.reloptions, CASE WHEN c.reltuples >= 0 THEN c.reltuples END::float8 AS reltuples,
        current_setting('autovacuum_vacuum_threshold')::float8 AS vacuum_threshold,
        current_setting('autovacuum_vacuum_scale_factor')::float8 AS vacuum_scale_factor
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      LEFT JOIN pg_stat_all_tables st ON st.relid = c.oid
      WHERE n.nspname = $1 AND c.relkind = 'r'
      ORDER BY c.relname`,

    // Sessions waiting for a lock on one of the schema's tables or rows, and who
    // holds them up (pg_blocking_pids), and sessions holding one of its tables in
    // ACCESS EXCLUSIVE mode (a VACUUM FULL, an ALTER, a LOCK TABLE), which every
    // reader waits for even when no one waits yet. Read from the catalogs and
    // pg_locks, which take no lock on those tables, so it answers while every other
    // check would wait. Not the doctor's own session. Durations on clock_timestamp():
    // a wait that began after this statement's transaction read as "-10 ms" against
    // now() (outside review 268).
    lockWaits: `SELECT w.pid, w.usename AS user, w.application_name AS application, w.state,
        CASE WHEN w.wait_event_type = 'Lock' THEN ${MS('clock_timestamp() - w.state_change')} END AS waiting_ms,
        ${MS('clock_timestamp() - w.xact_start')} AS transaction_ms,
        (SELECT string_agg(DISTINCT c.relname, ', ') FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
           JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE l.pid = w.pid AND l.granted AND l.mode = 'AccessExclusiveLock' AND n.nspname = $1) AS holds_exclusive,
        left(w.query, 200) AS query,
        coalesce((SELECT jsonb_agg(jsonb_build_object('pid', b.pid, 'user', b.usename,
            'application', b.application_name, 'state', b.state,
            'transaction_ms', ${MS('clock_timestamp() - b.xact_start')}, 'query', left(b.query, 200)) ORDER BY b.pid)
          FROM pg_stat_activity b WHERE b.pid = ANY(pg_blocking_pids(w.pid))), '[]') AS blocked_by
      FROM pg_stat_activity w
      WHERE w.datname = current_database() AND w.pid <> pg_backend_pid()
        -- A waiter holds or awaits a lock there (one waiting for a row first holds the row's tuple lock).
        AND EXISTS (SELECT FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
                      JOIN pg_namespace n ON n.oid = c.relnamespace
                    WHERE l.pid = w.pid AND n.nspname = $1
                      AND (w.wait_event_type = 'Lock' OR (l.granted AND l.mode = 'AccessExclusiveLock')))
      UNION ALL
      -- A prepared transaction holds its locks with no session (pid NULL in pg_locks):
      -- left behind, it never lets go by itself (outside review 233).
      SELECT NULL, p.owner, 'prepared transaction ' || quote_literal(p.gid), 'prepared', NULL, ${MS('now() - p.prepared')},
        string_agg(DISTINCT c.relname, ', '), '', '[]'::jsonb
      FROM pg_prepared_xacts p
        -- Its locks share the virtual transaction of the lock on its own xid.
        JOIN pg_locks x ON x.locktype = 'transactionid' AND x.transactionid = p.transaction AND x.pid IS NULL
        JOIN pg_locks l ON l.virtualtransaction = x.virtualtransaction AND l.pid IS NULL
        JOIN pg_class c ON c.oid = l.relation JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE p.database = current_database() AND l.granted AND l.mode = 'AccessExclusiveLock' AND n.nspname = $1
      GROUP BY p.gid, p.owner, p.prepared
      ORDER BY waiting_ms DESC NULLS LAST, transaction_ms DESC NULLS LAST`,

    idleInTransaction: `SELECT pid, usename AS user, application_name AS application, state,
        ${MS('now() - state_change')} AS idle_ms, ${MS('now() - xact_start')} AS transaction_ms,
        left(query, 200) AS last_query
      FROM pg_stat_activity
      WHERE state IN ('idle in transaction', 'idle in transaction (aborted)') AND datname = current_database()
      ORDER BY state_change`,

    // Sessions whose snapshot (backend_xmin) holds back the horizon below which
    // vacuum may remove dead rows: every row version deleted after it stays.
    oldestSnapshots: `SELECT pid, usename AS user, application_name AS application, state,
        age(backend_xmin)::int AS xmin_age, ${MS('now() - xact_start')} AS transaction_ms,
        left(query, 200) AS query
      FROM pg_stat_activity
      WHERE backend_xmin IS NOT NULL AND datname = current_database() AND pid <> pg_backend_pid()
      ORDER BY age(backend_xmin) DESC
      LIMIT 5`,

    // The oldest transaction with a transaction id in any database of the
    // server: the outbox relay publishes nothing written after it began
    // (pg_snapshot_xmin is server-wide), though vacuum here does not wait for it.
    // Other roles' sessions show backend_xid only to pg_read_all_stats.
    // Prepared transactions too (pg_prepared_xacts lists every database's): one
    // left prepared holds the relay back like an open one (outside review 124).
    oldestWriteTransaction: `SELECT * FROM (
        SELECT pid, datname::text AS database, usename::text AS user, application_name AS application,
          NULL::text AS prepared, ${MS('now() - xact_start')} AS transaction_ms, age(backend_xid) AS xid_age
        FROM pg_stat_activity
        WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid()
        UNION ALL
        SELECT NULL, database::text, owner::text, NULL, gid, ${MS('now() - prepared')}, age(transaction)
        FROM pg_prepared_xacts
      ) w
      ORDER BY xid_age DESC
      LIMIT 1`,

    preparedTransactions: `SELECT gid, owner, age(transaction)::int AS xmin_age, ${MS('now() - prepared')} AS transaction_ms
      FROM pg_prepared_xacts WHERE database = current_database()`,

    replicationSlots: `SELECT slot_name AS slot, slot_type AS type, active,
        age(xmin)::int AS xmin_age, age(catalog_xmin)::int AS catalog_xmin_age
      FROM pg_replication_slots`,

    notifyQueue: `SELECT pg_notification_queue_usage()::float8 AS usage`,

    // Other roles' sessions show a null backend_type without pg_read_all_stats: as
    // the schema's owner the doctor counted its own role's 5 of 291 (outside review
    // 185). Their database and user still show, which background processes lack.
    connections: `WITH client AS (
        SELECT application_name FROM pg_stat_activity
        WHERE backend_type = 'client backend' OR (backend_type IS NULL AND datid IS NOT NULL AND usesysid IS NOT NULL))
      SELECT (SELECT count(*) FROM client)::int AS used,
        (SELECT count(*) FROM client WHERE application_name LIKE 'sluice%')::int AS sluice,
        (SELECT count(*) FROM client WHERE application_name = 'sluice-listen')::int AS listening,
        current_setting('max_connections')::int AS max,
        current_setting('superuser_reserved_connections')::int AS reserved`,

    // B-tree indexes of the schema with what an estimate needs: entries, pages and
    // the average width of the key columns (pg_stats; 8 bytes per column when a
    // column has no statistics or the key is an expression).
    indexes: `SELECT ic.relname AS index, tc.relname AS table, ic.reltuples::float8 AS entries, ic.relpages::float8 AS pages,
        current_setting('block_size')::int AS block_size,
        coalesce((SELECT sum(coalesce(st.avg_width, 8)) FROM unnest(ix.indkey::int2[]) AS k(attnum)
                  LEFT JOIN pg_attribute a ON a.attrelid = tc.oid AND a.attnum = k.attnum
                  LEFT JOIN pg_stats st ON st.schemaname = n.nspname AND st.tablename = tc.relname AND st.attname = a.attname),
                 8)::float8 AS key_width,
        pg_relation_size(ic.oid)::float8 AS bytes
      FROM pg_index ix
      JOIN pg_class ic ON ic.oid = ix.indexrelid
      JOIN pg_class tc ON tc.oid = ix.indrelid
      JOIN pg_namespace n ON n.oid = tc.relnamespace
      JOIN pg_am am ON am.oid = ic.relam
      WHERE n.nspname = $1 AND am.amname = 'btree' AND ic.relkind = 'i'
      ORDER BY ic.relname`,

    // Due pending jobs per queue, how long the oldest has waited, and whether the
    // queue is paused (its backlog waits on purpose).
    backlog: `SELECT b.queue, b.due, b.oldest_ms, coalesce(q.paused, false) AS paused
      FROM (SELECT queue, count(*)::int AS due, ${MS('now() - min(run_at)')} AS oldest_ms
            FROM ${s}.jobs WHERE status = 'pending' AND run_at <= now() GROUP BY queue) b
        LEFT JOIN ${s}.queues q ON q.name = b.queue
      ORDER BY b.queue`,

    // Processing jobs whose heartbeat stopped longer ago than the visibility timeout
    // the rescuer gives them plus $1 ms: no worker holds them and no rescuer has
    // taken them back. That timeout is their worker's, as the registry holds it, or
    // for a worker it lacks the live leader's own, as the rescuer does (none without
    // a leader). Measured past it: a worker of a 1-day timeout beats every 4 h, and
    // its healthy jobs were reported stuck, critical after an hour (outside reviews 281, 282).
    stuck: `SELECT j.queue, count(*)::int AS jobs, ${MS('now() - min(j.locked_at)')} AS oldest_ms,
        ${MS('max(now() - j.locked_at - t.timeout)')} AS overdue_ms,
        (array_agg(j.id::text ORDER BY j.locked_at))[1:5] AS sample_ids
      FROM ${s}.jobs j LEFT JOIN ${s}.workers w ON w.id = j.locked_by
        CROSS JOIN LATERAL (SELECT coalesce(w.visibility_timeout_ms,
          (SELECT lw.visibility_timeout_ms FROM ${s}.leader l JOIN ${s}.workers lw ON lw.id = l.holder
           WHERE l.role = 'maintenance' AND l.expires_at > now()), 0)::float8 * interval '1 millisecond' AS timeout) t
      WHERE j.status = 'processing' AND j.locked_at < now() - t.timeout - $1::float8 * interval '1 millisecond'
      GROUP BY j.queue ORDER BY j.queue`,

    // Server-wide switches without which no dead tuple is ever removed (the
    // tables the schema turned it off on are read from the tables' reloptions).
    autovacuum: `SELECT current_setting('autovacuum') = 'on' AS autovacuum,
        current_setting('track_counts') = 'on' AS track_counts,
        current_setting('autovacuum_naptime') AS naptime`,

    // Is anyone running maintenance, and is the pruner keeping up? Its lag is that of
    // the completed and cancelled jobs it moves out: failed ones stay as dead letters
    // for their retention by design (outside review 178: one of them, an hour old,
    // was a warning that the pruner was failing).
    // $1: missed intervals after which a registered worker counts as dead. A lease
    // whose holder is no live worker was written by hand, or its worker is gone
    // and its lease not yet run out (outside review 266: a 'ghost' lease was "ok").
    maintenance: `SELECT (SELECT holder FROM ${s}.leader WHERE role = 'maintenance' AND expires_at > now()) AS leader,
        (SELECT holder FROM ${s}.leader WHERE role = 'pruner' AND expires_at > now()) AS pruner,
        (SELECT array_agg(l.role || ': ' || l.holder ORDER BY l.role) FROM ${s}.leader l
          WHERE l.expires_at > now()
            AND NOT EXISTS (SELECT FROM ${s}.workers w WHERE w.id = l.holder AND ${alive('w', '$1')})) AS not_live,
        (SELECT count(*) FROM ${s}.jobs WHERE status IN ('completed', 'failed', 'cancelled'))::int AS finished,
        (SELECT count(*) FROM ${s}.jobs WHERE status = 'failed')::int AS dead_letters,
        (SELECT ${MS('now() - min(coalesce(finished_at, updated_at))')} FROM ${s}.jobs
          WHERE status IN ('completed', 'cancelled')) AS oldest_finished_ms,
        (SELECT count(*) FROM ${s}.jobs WHERE status IN ('pending', 'processing'))::int AS active`,
  };
});
