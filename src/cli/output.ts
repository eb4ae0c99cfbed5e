import stringWidth from 'string-width';

/** A mistake in how the command was called: printed as one line, exit code 2. */
export class UsageError extends Error {}

/**
 * The command ran but could not do what was asked (no such job, job in the wrong
 * state): printed as one line, exit code 1.
 */
export class CommandFailed extends Error {}

/**
 * Every time the CLI prints, in tables, details and --json alike: ISO 8601 in UTC
 * with milliseconds, as `Date#toJSON` writes it (2026-01-01T09:30:00.000Z); '-'
 * for none. Also takes the text of a time stored inside jsonb (an error's `at`),
 * which Postgres writes in its own format (2026-01-01T09:30:00.123456+00:00).
 */
export function formatTime(value: Date | string | number | null | undefined): string {
  if (value === null || value === undefined) return '-';
  // A number too: the driver reads an infinite timestamp as ±Infinity.
  const date = value instanceof Date ? value : new Date(value);
  return Number.isNaN(date.getTime()) ? String(value) : date.toISOString();
}

/**
 * JSON.stringify's replacer for --json output: Dates already become ISO UTC, but
 * the attempt history's times (`at`, `started_at`, any `*_at`) are jsonb text in
 * Postgres's format, so they are rewritten to match.
 */
function isoErrorTimes(key: string, value: unknown): unknown {
  if (key !== 'errors' || !Array.isArray(value)) return value;
  return value.map((e: unknown) => (e !== null && typeof e === 'object' && !Array.isArray(e) ? isoTimeFields(e) : e));
}

/** A history entry with each time field (`at`, `*_at`) as formatTime writes it; null stays null. */
function isoTimeFields(entry: object): object {
  return Object.fromEntries(
    Object.entries(entry).map(([k, v]) =>
      (k === 'at' || k.endsWith('_at')) && (typeof v === 'string' || v instanceof Date) ? [k, formatTime(v)] : [k, v],
    ),
  );
}

/** Prints a value as one line of JSON (for --json output). */
export function printJson(value: unknown, out: NodeJS.WritableStream = process.stdout): void {
  out.write(`${jsonText(value, isoErrorTimes)}\n`);
}

/**
 * JSON.stringify, with the characters a terminal acts on that it leaves as they
 * are (DEL, the C1 controls, bidi overrides: outside review 269, `--json` printed
 * them raw) written as \\u escapes: the same JSON once parsed.
 */
export function jsonText(value: unknown, replacer?: (this: unknown, key: string, value: unknown) => unknown): string {
  const text = JSON.stringify(value, replacer) as string | undefined;
  return text === undefined ? 'null' : text.replace(HIDDEN_BUT_LINES, unicodeEscape);
}

/** A command that did its work but reports a result through a non-zero exit code (doctor: 1 warn, 2 critical). */
export class ExitStatus extends Error {
  constructor(readonly exitCode: number) {
    super(`exit status ${exitCode}`);
  }
}

/** Prints rows as left-aligned columns under a header. */
export function printTable(header: string[], rows: string[][]): void {
  process.stdout.write(formatTable(header, rows));
}

/**
 * A name as the CLI prints it among other text: as is, unless it holds a control
 * character (a line break, a tab), an invisible one, or begins or ends with white
 * space, which would break a table's rows or hide in it; then quoted and escaped
 * as a JSON string, the invisible characters as \\u escapes too.
 * Group keys, queue and task names may hold anything (outside review 86).
 */
export function printable(text: string): string {
  if (!HIDDEN.test(text) && text === text.trim()) return text;
  return JSON.stringify(text).replace(HIDDEN_ALL, unicodeEscape);
}

/**
 * Characters a terminal does not show as themselves: controls, format characters
 * (zero-width spaces, joiners, direction marks) and spaces other than ' '. A group
 * named '\u200b' printed as a blank name (outside review 181); JSON.stringify
 * escapes only the controls below U+0020, so the rest (DEL and the C1 controls,
 * U+0080-009F, which terminals act on too: outside review 267) are escaped here.
 */
const HIDDEN = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]|(?! )\p{Zs}/u;
const HIDDEN_ALL = new RegExp(HIDDEN.source, 'gu');

/**
 * Free text from a job (an error message, its stack, a payload) as a terminal
 * should show it: every control and invisible character as its \\u escape, line
 * breaks kept where `keepLines` (and tabs). An error message with escape codes cleared
 * the operator's screen and printed fake lines over real ones (outside reviews 265
 * and 266); names go through printable().
 */
export function terminalText(text: string, keepLines = true): string {
  return text.replace(keepLines ? HIDDEN_BUT_LINES : HIDDEN_ALL, unicodeEscape);
}

/** A character as \\u escapes (two for one beyond the BMP). */
function unicodeEscape(c: string): string {
  return [...Array(c.length).keys()].map((i) => `\\u${c.charCodeAt(i).toString(16).padStart(4, '0')}`).join('');
}

const HIDDEN_BUT_LINES = /(?![\n\t])[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]|(?! )\p{Zs}/gu;

/** Left-aligned columns separated by two spaces: readable, and easy to cut/awk. Cells as printable() shows them. */
export function formatTable(header: string[], rawRows: string[][]): string {
  const rows = rawRows.map((r) => r.map((cell) => (cell === '' ? cell : printable(cell))));
  // Columns as a terminal shows them: an emoji or a CJK name takes two, a combining mark none.
  const widths = header.map((h, i) => Math.max(stringWidth(h), ...rows.map((r) => stringWidth(r[i] ?? ''))));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c + ' '.repeat(widths[i]! - stringWidth(c))))
      .join('  ')
      .trimEnd();
  return [line(header), ...rows.map(line)].join('\n') + '\n';
}

/** A compact duration: 850ms, 12s, 5m, 3h 20m, 2d 4h. */
export function formatDuration(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)}ms`;
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m${s % 60 ? ` ${s % 60}s` : ''}`;
  const h = Math.floor(m / 60);
  if (h < 24) return `${h}h${m % 60 ? ` ${m % 60}m` : ''}`;
  const d = Math.floor(h / 24);
  return `${d}d${h % 24 ? ` ${h % 24}h` : ''}`;
}

/** The first line of a (possibly multi-line) error text, shortened to `max` characters. */
export function firstLine(text: string | null, max = 60): string {
  if (!text) return '';
  const line = text.split('\n', 1)[0]!;
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}
