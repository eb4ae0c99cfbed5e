/**
 * Array parameters as Postgres array literals, text that every library passes
 * through alike, for the adapters whose library does not send arrays as pg does.
 * Sluice's statements cast each array parameter (`$1::text[]`), so the text is
 * read as the type the statement names. MikroORM writes values into the
 * statement's text and spread an array into a list (a syntax error); postgres.js
 * typed an array of Buffers as one bytea (outside review 212).
 */
export function asText(values: readonly unknown[]): unknown[] {
  return values.map((v) => (Array.isArray(v) ? arrayLiteral(v) : v));
}

/** A Postgres array literal: every element quoted (and `"` and `\` escaped), NULL for null. */
function arrayLiteral(values: readonly unknown[]): string {
  return `{${values.map(element).join(',')}}`;
}

function element(v: unknown): string {
  if (v === null || v === undefined) return 'NULL';
  if (Array.isArray(v)) return arrayLiteral(v);
  if (Buffer.isBuffer(v)) return `"\\\\x${v.toString('hex')}"`;
  const text = v instanceof Date ? v.toISOString() : typeof v === 'object' ? JSON.stringify(v) : String(v as string);
  return `"${text.replace(/[\\"]/g, (c) => `\\${c}`)}"`;
}
