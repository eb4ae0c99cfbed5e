import { quoteSchema } from '../identifiers.js';
import { perSchema } from './per-schema.js';

/**
 * How long after its transaction began a lease the statement wrote ends, in ms (see
 * acquire). From the transaction's start, now(), not statement_timestamp(): a wait
 * for a table lock falls in the Parse message, and statement_timestamp() is when
 * the message after it arrived.
 */
const HELD_MS = `(extract(epoch FROM expires_at - now()) * 1000)::float8 AS held_ms`;

/**
 * The statements of the transactional outbox (migration 0015) for one schema:
 * publishing, and the relay's read, watermark, lease, failures and clean-up.
 * Values are always `$n` parameters; the schema is the only text spliced in.
 */
export interface OutboxStatements {
  readonly schema: string;
  /** $1 destination, $2 key, $3 headers, $4 payload (bytea). Returns the id. */
  readonly publishOne: string;
  /** Arrays of the same four, one element per message, inserted in array order. Returns the ids in that order. */
  readonly publishMany: string;
  /** The order locks of keys ($1 text[]) for the rest of the transaction (migration 0032). */
  readonly lockKeys: string;
  /** The partition counts a destination's relay rows already have ($1 destination). */
  readonly partitionCounts: string;
  /**
   * Taken by a relay while it registers a destination's partitions (to the end of
   * that transaction): one registration at a time, so relays started together
   * with different counts cannot both pass the check (outside review 74). The
   * mode conflicts with itself, not with the relays' updates.
   */
  readonly lockRegistrations: string;
  /** Creates the watermark rows of a destination's partitions ($1 destination, $2 partitions) if missing. */
  readonly createPartitions: string;
  /**
   * Locks a destination's partition rows and says whether their count may change:
   * leases still held, messages not yet published (each past its own partition's
   * watermark), and the furthest watermark, where new partitions start.
   */
  readonly repartitionCheck: string;
  /** Deletes a destination's partition rows ($1 destination), in the transaction of repartitionCheck. */
  readonly dropPartitions: string;
  /**
   * Creates a destination's partition rows at a watermark ($1 destination, $2
   * partitions, $3 txid, $4 id), partition 0 carrying the old rows' published
   * count and time ($5, $6) so the destination's totals go on.
   */
  readonly createPartitionsAt: string;
  /**
   * Takes a partition's lease if free or expired, or renews it for its holder.
   * $1 destination, $2 partition, $3 holder, $4 lease ms, $5 partition count.
   * One row: the watermark when held (else nulls), and `other`, another partition
   * count the destination is relayed with now (a relay started since with another
   * count changed it), else null.
   */
  readonly acquire: string;
  /** Gives the lease up ($1 destination, $2 partition, $3 holder). */
  readonly resign: string;
  /**
   * The next window of committed messages after the watermark, with the rows of
   * partition $5 (of $4) and one marker row for the window's end.
   * $1 destination, $2 watermark txid, $3 watermark id, $6 window size, $7 the
   * txid of this process's clean-up transaction in flight (or null), $8 the most
   * payload bytes in a window (its first message is always in it).
   */
  readonly fetchWindow: string;
  /** Whether messages past the watermark exist that are not below the horizon yet ($1 destination, $2 txid, $3 id). */
  readonly beyondHorizon: string;
  /**
   * Moves the watermark and renews the lease, for the holder only (0 rows: the
   * lease was lost). $1 destination, $2 partition, $3 holder, $4 txid, $5 id,
   * $6 published count, $7 lease ms.
   */
  readonly advance: string;
  /** Counts one more failed try of a message ($1 id, $2 destination, $3 error). Returns attempts. */
  readonly recordFailure: string;
  /** Forgets the failures of messages that have now been published ($1 destination, $2 ids). */
  readonly clearFailures: string;
  /** Copies a message to the dead letters with its failure count ($1 id, $2 destination, $3 txid). */
  readonly deadLetter: string;
  /**
   * Deletes up to $2 published messages of destination $1 (behind every partition's
   * watermark), and the failures recorded for them. Returns the count.
   */
  readonly deletePublished: string;
  /** The schema's outbox identity (migration 0031), part of every message id. */
  readonly identity: string;
  /** The transaction's own txid (assigned now): a clean-up transaction says who it is before it deletes. */
  readonly currentTxid: string;
  /** Reclaims the space of deleted messages now, rather than at autovacuum's next round. */
  readonly vacuum: string;
  /** Per destination: messages waiting, the oldest one's age, published total, relays holding leases, dead letters. */
  readonly lag: string;
}

/** The outbox statements for one schema, built once per schema. */
export const outboxStatements = perSchema((schema: string): OutboxStatements => {
  const s = quoteSchema(schema);
  const outbox = `${s}.outbox`;
  const relays = `${s}.outbox_relays`;
  // A message's partition: its key's hash (or, without a key, its id's: such
  // messages have no order to keep and spread evenly). hashtext() is a signed
  // int4; shifted to be non-negative before the modulo (abs() of its minimum overflows).
  const partitionOf = (row: string, count = '$4') =>
    `mod(hashtext(coalesce(${row}.key, ${row}.id::text))::bigint + 2147483648, ${count})`;
  // Every transaction below the xmin of the statement's snapshot has ended, so
  // the rows below it are final: none can appear later behind the watermark.
  // One running transaction is left out ($7): the relay's own clean-up, which
  // only deletes messages and so can never add one behind the watermark. Without
  // that, every message committed while a DELETE of published rows ran waited for
  // it (a few ms every second at 1,000 messages/s; hundreds of ms under load).
  // With no $7 this is pg_snapshot_xmin(): the lowest running txid, else xmax.
  const horizon = `(SELECT least(pg_snapshot_xmax(s),
      (SELECT min(x) FROM pg_snapshot_xip(s) x WHERE x IS DISTINCT FROM $7::xid8)) FROM pg_current_snapshot() s)`;
  return {
    schema,
    // $3 is JSON text, read as text first: typed jsonb, postgres.js would encode the text as a JSON string.
    publishOne: `INSERT INTO ${outbox} (destination, key, headers, payload) VALUES ($1, $2, $3::text::jsonb, $4) RETURNING id`,
    // Rows are inserted, and take their ids, in the arrays' order: messages of one
    // key in one call keep their order. The headers are JSON text, read as text[]
    // first: typed jsonb[], postgres.js encoded each as a JSON string.
    publishMany: `INSERT INTO ${outbox} (destination, key, headers, payload)
      SELECT * FROM unnest($1::text[], $2::text[], $3::text[]::jsonb[], $4::bytea[]) RETURNING id`,
    // A column of type void, as the bare call returns, Prisma cannot read (outside review 212).
    lockKeys: `SELECT true AS locked FROM ${s}.lock_outbox_keys(VARIADIC $1::text[])`,
    partitionCounts: `SELECT DISTINCT partitions FROM ${relays} WHERE destination = $1`,
    lockRegistrations: `LOCK TABLE ${relays} IN SHARE UPDATE EXCLUSIVE MODE`,
    createPartitions: `INSERT INTO ${relays} (destination, partition, partitions)
      SELECT $1, p, $2 FROM generate_series(0, $2::int - 1) p ON CONFLICT DO NOTHING`,
    // New partitions may start at the furthest watermark once no message waits
    // behind any: every message at or below it is published, and any later one
    // comes from a transaction that was still running when that watermark was
    // set (it only passes transactions that had ended), so it lies beyond.
    repartitionCheck: `WITH old AS (
        SELECT partition, partitions, txid, id, holder, expires_at, published, published_at
        FROM ${relays} WHERE destination = $1 FOR UPDATE
      )
      SELECT (SELECT count(*)::int FROM old WHERE holder IS NOT NULL AND expires_at > now()) AS held,
        (SELECT count(*)::int FROM ${outbox} o JOIN old r ON r.partition = ${partitionOf('o', 'r.partitions')}
          WHERE o.destination = $1 AND (o.txid, o.id) > (r.txid, r.id)) AS waiting,
        (SELECT txid::text FROM old ORDER BY txid DESC, id DESC LIMIT 1) AS txid,
        (SELECT id FROM old ORDER BY txid DESC, id DESC LIMIT 1) AS id,
        (SELECT coalesce(sum(published), 0)::text FROM old) AS published,
        (SELECT max(published_at) FROM old) AS published_at`,
    dropPartitions: `DELETE FROM ${relays} WHERE destination = $1`,
    createPartitionsAt: `INSERT INTO ${relays} (destination, partition, partitions, txid, id, published, published_at)
      SELECT $1, p, $2, $3::xid8, $4, CASE WHEN p = 0 THEN $5::bigint ELSE 0 END, CASE WHEN p = 0 THEN $6::timestamptz END
      FROM generate_series(0, $2::int - 1) p`,
    // $5 partitions: a relay started before the count changed never takes a partition of the new layout.
    // The lease runs from the write, not from the statement's start, and held_ms
    // says how long after the transaction began it ends: the holder counts it from
    // when it sent the statement. Dated from the start, a lease taken after a wait
    // on a lock was born expired, and the next relay took it too (outside review 210).
    acquire: `WITH taken AS (
        UPDATE ${relays} SET holder = $3, expires_at = clock_timestamp() + $4 * interval '1 millisecond'
        WHERE destination = $1 AND partition = $2 AND partitions = $5 AND (holder IS NULL OR holder = $3 OR expires_at < now())
        RETURNING txid, id, ${HELD_MS}
      )
      SELECT t.txid, t.id, t.held_ms,
        (SELECT r.partitions FROM ${relays} r WHERE r.destination = $1 AND r.partitions <> $5 LIMIT 1) AS other
      FROM (SELECT) one LEFT JOIN taken t ON true`,
    resign: `UPDATE ${relays} SET holder = NULL, expires_at = NULL WHERE destination = $1 AND partition = $2 AND holder = $3`,
    // The window is an ordered walk of the primary key from the watermark (the
    // LIMIT inside keeps the planner on it: a filter on the partition outside
    // would make it guess few matches and sort the whole backlog instead). Every
    // relay of a destination walks all of its rows and keeps its partition's;
    // the marker row is the window's end, where the watermark may go once this
    // partition's rows in it are published, even if there were none. The window
    // ends early where its payloads pass $8 bytes (octet_length reads a TOASTed
    // value's size without fetching it): counted in rows only, 2,000 messages of
    // 1 MB made windows of 2 GB, and relays that lost their leases reading them
    // (outside review 152).
    fetchWindow: `WITH win AS MATERIALIZED (
        SELECT w.id, w.txid, w.key, w.headers, w.payload, w.created_at FROM (
          SELECT l.*, sum(octet_length(l.payload)) OVER (ORDER BY l.txid, l.id ROWS UNBOUNDED PRECEDING)
              - octet_length(l.payload) AS bytes_before
          FROM (
            SELECT o.id, o.txid, o.key, o.headers, o.payload, o.created_at FROM ${outbox} o
            WHERE o.destination = $1 AND (o.txid, o.id) > ($2::xid8, $3::bigint) AND o.txid < ${horizon}
            ORDER BY o.txid, o.id LIMIT $6
          ) l
        ) w
        WHERE w.bytes_before < $8::bigint
      )
      SELECT * FROM (
        SELECT w.id, w.txid, w.key, w.headers, w.payload, w.created_at, false AS marker FROM win w
        WHERE $4::int = 1 OR ${partitionOf('w')} = $5
        UNION ALL
        (SELECT w.id, w.txid, NULL, NULL, NULL, NULL, true FROM win w ORDER BY w.txid DESC, w.id DESC LIMIT 1)
      ) r ORDER BY r.txid, r.id, r.marker`,
    beyondHorizon: `SELECT EXISTS (SELECT 1 FROM ${outbox} WHERE destination = $1 AND (txid, id) > ($2::xid8, $3::bigint)) AS waiting`,
    advance: `UPDATE ${relays} SET txid = $4::xid8, id = $5, published = published + $6,
        published_at = CASE WHEN $6 > 0 THEN now() ELSE published_at END,
        expires_at = clock_timestamp() + $7 * interval '1 millisecond'
      WHERE destination = $1 AND partition = $2 AND holder = $3 RETURNING ${HELD_MS}`,
    recordFailure: `INSERT INTO ${s}.outbox_failures (id, destination, attempts, last_error) VALUES ($1, $2, 1, $3)
      ON CONFLICT (id) DO UPDATE SET attempts = ${s}.outbox_failures.attempts + 1, last_error = EXCLUDED.last_error,
        last_failed_at = now()
      RETURNING attempts`,
    clearFailures: `DELETE FROM ${s}.outbox_failures WHERE destination = $1 AND id = ANY($2::bigint[])`,
    deadLetter: `WITH failed AS (DELETE FROM ${s}.outbox_failures WHERE id = $1 RETURNING attempts, last_error)
      INSERT INTO ${s}.outbox_dead_letters (id, txid, destination, key, headers, payload, created_at, attempts, last_error)
      SELECT o.id, o.txid, o.destination, o.key, o.headers, o.payload, o.created_at, coalesce(f.attempts, 0), f.last_error
      FROM ${outbox} o LEFT JOIN failed f ON true
      WHERE o.destination = $2 AND o.txid = $3::xid8 AND o.id = $1
      ON CONFLICT (id) DO NOTHING`,
    // Behind the slowest partition's watermark, in chunks of $2 so that one
    // statement never holds a huge delete. Only once every partition has a row
    // of the same layout (a destination whose relays never started keeps all).
    deletePublished: `WITH slowest AS (
        SELECT txid, id FROM ${relays} WHERE destination = $1 ORDER BY txid, id LIMIT 1
      ), gone AS (
        DELETE FROM ${outbox} o USING (
          SELECT p.destination, p.txid, p.id FROM ${outbox} p, slowest w
          WHERE p.destination = $1 AND (p.txid, p.id) <= (w.txid, w.id)
          ORDER BY p.txid, p.id LIMIT $2
        ) d
        WHERE o.destination = d.destination AND o.txid = d.txid AND o.id = d.id
        RETURNING o.id
      ), cleared AS (
        -- A message refused and then published by another relay (a restart, a
        -- standby) kept its failure row, and the doctor warned for ever (outside
        -- review 74): the row goes with the message.
        DELETE FROM ${s}.outbox_failures f WHERE f.destination = $1 AND f.id IN (SELECT id FROM gone)
      )
      SELECT count(*)::int AS deleted FROM gone`,
    identity: `SELECT id::text AS id FROM ${s}.outbox_identity`,
    currentTxid: `SELECT pg_current_xact_id()::text AS txid`,
    // TRUNCATE false: cutting empty pages off the end needs an ACCESS EXCLUSIVE
    // lock, which stops every publish (and the relay's reads) while it is held; the
    // pages are reused by the next messages anyway, the table being a steady size.
    vacuum: `VACUUM (TRUNCATE false) ${outbox}`,
    lag: `SELECT r.destination, r.partitions::int,
        (SELECT count(*) FROM ${outbox} o WHERE o.destination = r.destination
           AND (o.txid, o.id) > (r.min_txid, r.min_id))::bigint AS waiting,
        coalesce(extract(epoch FROM now() - (SELECT min(o.created_at) FROM ${outbox} o
           WHERE o.destination = r.destination AND (o.txid, o.id) > (r.min_txid, r.min_id))), 0)::float8 AS oldest_seconds,
        r.published::bigint, r.held::int, r.last_published_at,
        (SELECT count(*) FROM ${s}.outbox_dead_letters d WHERE d.destination = r.destination)::bigint AS dead_letters,
        (SELECT count(*) FROM ${s}.outbox_failures f WHERE f.destination = r.destination)::bigint AS failing
      FROM (
        SELECT destination, max(partitions) AS partitions, sum(published) AS published,
          count(*) FILTER (WHERE holder IS NOT NULL AND expires_at > now()) AS held,
          max(published_at) AS last_published_at,
          (array_agg(txid ORDER BY txid, id))[1] AS min_txid, (array_agg(id ORDER BY txid, id))[1] AS min_id
        FROM ${relays} GROUP BY destination
      ) r
      ORDER BY r.destination`,
  };
});
