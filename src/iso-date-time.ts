/** ISO 8601: a date, or a date and time with its zone (Z or ±HH:MM). */
const ISO_DATE_TIME = /^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2}))?$/i;

const EXAMPLE = 'like 2026-01-31T09:00:00Z or 2026-01-31T10:00:00+01:00';

/**
 * A date and time in ISO 8601 (2026-01-31T09:00:00Z, or a date alone: midnight
 * UTC), or what is wrong with `value` (passed to `fail`). Only that: JavaScript's
 * Date also takes "12", "March 5" and 2030-02-30 (as 2001-12-01, 2001-03-05 and
 * 2 March), and a time without a zone as the machine's local time, so a typo ran a
 * job at once or hours off (outside reviews 69 and 83).
 */
export function parseIsoDateTime(value: string, fail: (problem: string) => never): Date {
  const text = value.trim();
  const match = ISO_DATE_TIME.exec(text);
  if (!match) {
    const zoneless = /^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?$/i.test(text);
    return fail(zoneless ? `needs a time zone: ${text}Z for UTC, or an offset (+01:00)` : `must be an ISO 8601 date, ${EXAMPLE}`);
  }
  const [, year, month, day, hour = '0', minute = '0', second = '0'] = match;
  const date = new Date(text);
  // The fields as written must be a real calendar date and time (Date rolls 30 February over into March).
  const calendar = new Date(0);
  calendar.setUTCFullYear(Number(year), Number(month) - 1, Number(day));
  const valid =
    !Number.isNaN(date.getTime()) &&
    calendar.getUTCFullYear() === Number(year) &&
    calendar.getUTCMonth() === Number(month) - 1 &&
    calendar.getUTCDate() === Number(day) &&
    Number(hour) < 24 &&
    Number(minute) < 60 &&
    Number(second) < 60;
  if (!valid) return fail(`is not a date that exists, ${EXAMPLE}`);
  return date;
}
