/**
 * The one format of every time the dashboard's API returns: ISO 8601, UTC,
 * milliseconds (Date#toISOString). Postgres text ("2026-12-01T06:17:52.942406+00:00",
 * as jsonb gives it) and Dates alike.
 */
export function iso(value: Date | string | null | undefined): string | null {
  if (value === null || value === undefined) return null;
  return (value instanceof Date ? value : new Date(value)).toISOString();
}
