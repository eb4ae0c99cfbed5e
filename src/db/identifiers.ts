import { createHash } from 'node:crypto';
import { ConfigError } from '../errors.js';
import { checks } from '../validate.js';

const { checkSchemaName } = checks(ConfigError);

/**
 * Checks a schema name and returns it quoted as an identifier. The schema is the
 * only identifier Sluice ever puts into SQL text, so it is validated and quoted
 * once, at start-up; every value goes in as a `$n` parameter.
 */
export function quoteSchema(schema: string): string {
  return quoteIdent(checkSchemaName(schema));
}

/** The LISTEN/NOTIFY channel of a schema (the insert trigger uses the same name). */
export function channelFor(schema: string): string {
  return `sluice:${schema}`;
}

/**
 * The channel on which the statement that finishes a job announces it, for
 * Queue.waitFor(). Payload: the job id. 'sluice:' + 50-byte schema + ':done' fits
 * Postgres' 63-byte channel names.
 */
export function doneChannelFor(schema: string): string {
  return `sluice:${schema}:done`;
}

/** Quotes any identifier (used for LISTEN, which cannot take a parameter). */
export function quoteIdent(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

/** Postgres keeps the first 63 bytes of an identifier, a prepared statement's name included. */
const MAX_NAME_BYTES = 63;

/**
 * The name of a named prepared statement of `kind` for `schema`. Unique per
 * schema: Queues of two schemas may share one pool, so one connection. A name
 * longer than Postgres keeps would be cut, and two long schemas with a common
 * start would then share one name ("prepared statement ... already exists", an
 * outside review); such names end in a hash of the schema instead.
 */
export function preparedName(kind: string, schema: string): string {
  const name = `sluice-${kind}-${schema}`;
  if (Buffer.byteLength(name) <= MAX_NAME_BYTES) return name;
  return `sluice-${kind}-${createHash('sha256').update(schema).digest('hex').slice(0, 24)}`;
}
