/**
 * The one interface Sluice needs from a database connection: run a parameterised
 * statement and get rows back. A `pg` Pool, Client or PoolClient satisfies it as
 * is, so a caller's open transaction can be passed straight to `enqueue`.
 */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<{ rows: any[] }>;
}

/** Runs a statement and returns its rows, typed by the caller. */
export async function rows<T>(db: Queryable, text: string, values?: unknown[]): Promise<T[]> {
  const result = await db.query(text, values);
  return result.rows as T[];
}
