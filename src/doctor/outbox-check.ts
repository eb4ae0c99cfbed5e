import { rows, type Queryable } from '../db/executor.js';
import { quoteSchema } from '../db/identifiers.js';
import { doctorStatements } from '../db/statements/doctor.js';
import { outboxLag, type OutboxLag } from '../outbox/lag.js';
import { worst, type CheckResult, type Severity } from './findings.js';
import { formatMs } from './format.js';

const ID = 'outbox_lag';
const TITLE = 'outbox relay lag';
/** Age of the oldest unpublished message where warn and critical begin, in seconds. */
export const OUTBOX_LAG_SECONDS: [warn: number, critical: number] = [60, 600];

/**
 * Whether the outbox relays keep up: per destination, how old the oldest
 * message not yet published is, whether any relay holds its partitions, and
 * whether messages were dead-lettered or are being refused.
 */
export async function checkOutbox(db: Queryable, schema: string): Promise<CheckResult> {
  const [found] = await rows<{ installed: boolean }>(db, doctorStatements(schema).installed, [`${quoteSchema(schema)}.outbox`]);
  if (found?.installed !== true) {
    return { id: ID, title: TITLE, status: 'ok', summary: 'no outbox in this schema (migration 0015)', details: [] };
  }
  const lags = await outboxLag(db, schema);
  // Only where a destination is behind: then the oldest writer is the likely cause.
  const [writer] = behind(lags) ? await rows<OldestWriter>(db, doctorStatements(schema).oldestWriteTransaction) : [];
  return outboxResult(lags, writer);
}

/** Some destination's oldest message waits past the warning age: the oldest writer is the likely cause. */
function behind(lags: readonly OutboxLag[]): boolean {
  return lags.some((l) => l.oldestSeconds >= OUTBOX_LAG_SECONDS[0]);
}

/** The oldest transaction with a transaction id on the server, open or prepared, any database. */
export interface OldestWriter {
  /** null for a prepared transaction. */
  pid: number | null;
  /** The gid of a prepared transaction. */
  prepared: string | null;
  database: string | null;
  user: string | null;
  application: string | null;
  transaction_ms: number | null;
}

export function outboxResult(lags: OutboxLag[], writer?: OldestWriter): CheckResult {
  const [warnAt, criticalAt] = OUTBOX_LAG_SECONDS;
  const judged = lags.map((l) => {
    const byAge: Severity = l.oldestSeconds >= criticalAt ? 'critical' : l.oldestSeconds >= warnAt ? 'warn' : 'ok';
    const unattended: Severity = l.waiting > 0 && l.relaysHolding === 0 ? 'critical' : 'ok';
    const refused: Severity = l.deadLetters > 0 || l.failing > 0 ? 'warn' : 'ok';
    return { ...l, status: worst([byAge, unattended, refused]) };
  });
  const status = worst(judged.map((j) => j.status));
  const describe = (j: (typeof judged)[number]) =>
    `${j.destination}: ${j.waiting} waiting, oldest ${formatMs(j.oldestSeconds * 1000)}, ` +
    `${j.relaysHolding}/${j.partitions} partitions held, ${j.deadLetters} dead letters, ${j.failing} failing`;
  const bad = judged.filter((j) => j.status !== 'ok');
  // Named here, not only in the snapshot check: that one is vacuum's, of this
  // database, and a transaction in another database holds the relay back too (outside review 122).
  const who = (w: OldestWriter) =>
    w.prepared !== null
      ? `prepared transaction '${w.prepared}' in database ${w.database ?? '?'} (${w.user ?? 'unknown'}), prepared ${formatMs(w.transaction_ms ?? 0)} ago`
      : `pid ${w.pid} in database ${w.database ?? '?'} (${w.application || w.user || 'unknown'}), open ${formatMs(w.transaction_ms ?? 0)}`;
  const holder = writer
    ? `; oldest write transaction on the server: ${who(writer)}`
    : behind(lags)
      ? '; no write transaction open that this role can see'
      : '';
  const summary =
    judged.length === 0
      ? 'no relay has started on this schema'
      : bad.length > 0
        ? bad.map(describe).join('; ') + holder
        : `${judged.length} destination(s) relayed, none behind: ${judged.map(describe).join('; ')}`;
  // Advice only for what was found: an outbox warned for one dead letter was told
  // of writers and relays it did not have, and one behind of dead letters it did not have (outside review 251).
  const found = (test: (j: (typeof judged)[number]) => boolean) => bad.some(test);
  // "Named above" only where it is: the holder is looked for once a message is a minute old (outside review 247).
  const named = writer ? 'the oldest is named above' : `the oldest is named once a message has waited ${warnAt} s`;
  const advice = [
    found((j) => j.waiting > 0 && j.relaysHolding === 0) &&
      'A destination with messages waiting and no partition held has no relay running: start `sluice relay`.',
    found((j) => j.oldestSeconds >= warnAt && j.relaysHolding > 0) &&
      'Old messages with relays running: the broker is down, refusing (see the relay log and outbox_failures) or ' +
        'not taking them (a full RabbitMQ queue or JetStream stream: they wait, counting no try, so the relay log ' +
        'alone says so, as its `failure` lines).',
    // Wherever the summary names the oldest writer: a started relay waits for it too.
    found((j) => j.oldestSeconds >= warnAt) &&
      'A long write transaction anywhere on the server, in any database, a prepared one included, holds relays ' +
        `back: a relay publishes only what every older transaction has finished around (${named}; a role without ` +
        'pg_read_all_stats sees only its own sessions).',
    found((j) => j.failing > 0) &&
      'Messages the broker refused are retried until maxAttempts refusals, with the last error in outbox_failures.',
    found((j) => j.deadLetters > 0) && 'Dead letters are in outbox_dead_letters with the broker error.',
  ]
    .filter(Boolean)
    .join(' ');
  return status === 'ok'
    ? { id: ID, title: TITLE, status, summary, details: judged }
    : { id: ID, title: TITLE, status, summary, advice, details: judged };
}
