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
