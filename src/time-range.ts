import { types } from 'node:util';

// Dates Postgres reads back from an ISO string: JS dates reach far beyond year 9999,
// but their six-digit-year ISO form ("+275760-09-13...") is not valid input to timestamptz.
const MIN_TIME = Date.parse('0001-01-01T00:00:00.000Z');
const MAX_TIME = Date.parse('9999-12-31T23:59:59.999Z');

/**
 * The time of `value` in ms when it is a Date (of any realm, so also one made in a
 * node:vm context) holding a valid time: read through Date.prototype, not through
 * methods the object may have replaced. Undefined for anything else.
 */
export function timeOf(value: unknown): number | undefined {
  if (!types.isDate(value)) return undefined;
  const time = Date.prototype.getTime.call(value);
  return Number.isNaN(time) ? undefined : time;
}

/** True when `time` (ms) lies within the years 1 to 9999, which Postgres' timestamptz reads back. */
export function storableTime(time: number): boolean {
  return time >= MIN_TIME && time <= MAX_TIME;
}

/** True when `ms` is a delay from now that Postgres can store: finite, >= 0, ending within the year 9999. */
export function storableDelay(ms: unknown): ms is number {
  return typeof ms === 'number' && Number.isFinite(ms) && ms >= 0 && ms <= MAX_TIME - Date.now();
}

/** True when `ms` is an age Postgres can take from now(): finite, >= 0, reaching back no further than the year 1. */
export function storableAge(ms: unknown): ms is number {
  return typeof ms === 'number' && Number.isFinite(ms) && ms >= 0 && Date.now() - ms >= MIN_TIME;
}
