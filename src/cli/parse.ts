import { InvalidArgumentError, Option } from 'commander';
import ms from 'ms';

/**
 * Argument parsers for commander options. They throw InvalidArgumentError, which
 * commander reports as a one-line usage error (exit code 2).
 */

/** An integer within [min, max]. */
export function integer(min: number, max: number): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (!/^-?\d+$/.test(value.trim()) || !Number.isSafeInteger(n) || n < min || n > max) {
      throw new InvalidArgumentError(`must be an integer from ${min} to ${max}`);
    }
    return n;
  };
}

/**
 * A duration with a unit, parsed by `ms`: 500ms, 30s, 5m, 2h, 7d. A bare number
 * is refused: `--older-than 7` meaning seven milliseconds would delete far more
 * than anyone typing it meant.
 */
export function duration(value: string): number {
  const trimmed = value.trim();
  if (/^\d+(\.\d+)?$/.test(trimmed)) {
    // The library's options are in ms (shutdownTimeoutMs: 10000), so say which to type.
    throw new InvalidArgumentError(`needs a unit: ${trimmed}ms for milliseconds, ${trimmed}s for seconds`);
  }
  const parsed = ms(trimmed as ms.StringValue);
  if (typeof parsed !== 'number' || !Number.isFinite(parsed) || parsed < 0) {
    throw new InvalidArgumentError('must be a duration with a unit, like 500ms, 30s, 5m, 2h or 7d');
  }
  return parsed;
}

/** ISO 8601: a date, or a date and time with its zone (Z or ±HH:MM). */
const ISO_DATE_TIME = /^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2}))?$/i;

/**
 * A date and time in ISO 8601 (2026-01-31T09:00:00Z, or a date alone: midnight
 * UTC). Only that: JavaScript's Date also takes "12", "March 5" and 2030-02-30
 * (as 2001-12-01, 2001-03-05 and 2 March), and a time without a zone as the
 * machine's local time, so a typo ran a job at once or hours off (outside review 69).
 */
export function dateTime(value: string): Date {
  const example = 'like 2026-01-31T09:00:00Z or 2026-01-31T10:00:00+01:00';
  const match = ISO_DATE_TIME.exec(value.trim());
  if (!match) {
    const zoneless = /^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?$/i.test(value.trim());
    throw new InvalidArgumentError(
      zoneless ? `needs a time zone: ${value.trim()}Z for UTC, or an offset (+01:00)` : `must be an ISO 8601 date, ${example}`,
    );
  }
  const [, year, month, day, hour = '0', minute = '0', second = '0'] = match;
  const date = new Date(value.trim());
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
  if (!valid) throw new InvalidArgumentError(`is not a date that exists, ${example}`);
  return date;
}

/** For repeatable options (`--queue a --queue b`): collects every value. */
export function collect(value: string, previous: string[] = []): string[] {
  return [...previous, value];
}

/**
 * An option taking a duration, with a default shown in --help the way it is typed
 * (`(default: "10s")`): shown as milliseconds, the default would be a value the
 * option itself refuses.
 */
export function durationOption(flags: string, description: string, defaultMs: number): Option {
  return new Option(flags, description).argParser(duration).default(defaultMs, `"${ms(defaultMs)}"`);
}
