// Formatting of numbers, times and durations for display.

const numberFormat = new Intl.NumberFormat();

/** @param {number | null | undefined} n */
export function count(n) {
  return n === null || n === undefined ? '–' : numberFormat.format(n);
}

/** "1 job", "2 jobs": `n` counted, with the noun in the number it takes. @param {number} n @param {string} noun */
export function counted(n, noun) {
  return `${count(n)} ${n === 1 ? noun : `${noun}s`}`;
}

/** A duration in ms as "850 ms", "12 s", "3 min", "2 h 5 min", "3 d". @param {number | null | undefined} ms */
export function duration(ms) {
  if (ms === null || ms === undefined) return '–';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min`;
  const hours = Math.floor(m / 60);
  if (hours < 48) return `${hours} h ${m % 60} min`;
  return `${Math.floor(hours / 24)} d`;
}

/** @param {number | null | undefined} rate 0..1 */
export function percent(rate) {
  if (rate === null || rate === undefined) return '–';
  return `${(rate * 100).toFixed(rate > 0 && rate < 0.01 ? 2 : 1)} %`;
}

/** A timestamp from the API (ISO string) in local time, or "–". @param {string | null | undefined} iso */
export function time(iso) {
  if (!iso) return '–';
  const d = new Date(iso);
  return d.toLocaleString(undefined, { dateStyle: 'short', timeStyle: 'medium' });
}

/** "3 min ago" / "in 5 s". @param {string | null | undefined} iso */
export function relative(iso) {
  if (!iso) return '';
  const diff = Date.parse(iso) - Date.now();
  return diff > 0 ? `in ${duration(diff)}` : `${duration(-diff)} ago`;
}
