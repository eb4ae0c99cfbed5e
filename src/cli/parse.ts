import { InvalidArgumentError, Option } from 'commander';
import ms from 'ms';
import { parseIsoDateTime } from '../iso-date-time.js';

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
  // ms() throws for an empty string (a stack trace and exit 1, outside review 164: --refresh '').
  const parsed = trimmed === '' ? undefined : ms(trimmed as ms.StringValue);
  // Outside review 97: "-5s" was told it needs a unit.
  if (typeof parsed === 'number' && parsed < 0) throw new InvalidArgumentError('must not be negative');
  if (typeof parsed !== 'number' || !Number.isFinite(parsed)) {
    throw new InvalidArgumentError('must be a duration with a unit, like 500ms, 30s, 5m, 2h or 7d');
  }
  return parsed;
}

/**
 * A duration (as `duration` takes it) of a whole number of milliseconds within
 * [minMs, maxMs], checked here so the message names the flag and the way it is
 * typed, not the library option behind it (outside review 126: "--visibility-timeout
 * 10ms" was answered with "visibilityTimeoutMs must be an integer from 1000 to 86400000").
 */
export function durationWithin(minMs: number, maxMs: number): (value: string) => number {
  return (value) => {
    let n: number;
    try {
      n = duration(value);
    } catch (err) {
      // With the range, not duration()'s examples, some of them outside it (outside
      // review 211: --refresh abc was told "like ... 2h or 7d", then 2h was refused).
      if (!(err instanceof InvalidArgumentError) || !err.message.startsWith('must be a duration')) throw err;
      throw new InvalidArgumentError(`must be a duration with a unit (ms, s, m, h, d) from ${ms(minMs)} to ${ms(maxMs)}`);
    }
    if (!Number.isInteger(n) || n < minMs || n > maxMs) {
      throw new InvalidArgumentError(`must be a whole number of milliseconds from ${ms(minMs)} to ${ms(maxMs)}`);
    }
    return n;
  };
}

/** A date and time in ISO 8601 (see parseIsoDateTime), or an InvalidArgumentError. */
export function dateTime(value: string): Date {
  return parseIsoDateTime(value, (problem) => {
    throw new InvalidArgumentError(problem);
  });
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
export function durationOption(
  flags: string,
  description: string,
  defaultMs: number,
  parse: (value: string) => number = duration,
): Option {
  return new Option(flags, description).argParser(parse).default(defaultMs, `"${ms(defaultMs)}"`);
}
