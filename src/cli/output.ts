/** A mistake in how the command was called: printed as one line, exit code 2. */
export class UsageError extends Error {}

/** Prints a value as one line of JSON (for --json output). */
export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value)}\n`);
}

/** A command that did its work but reports a result through a non-zero exit code (doctor: 1 warn, 2 critical). */
export class ExitStatus extends Error {
  constructor(readonly exitCode: number) {
    super(`exit status ${exitCode}`);
  }
}

/** Prints rows as left-aligned columns under a header. */
export function printTable(header: string[], rows: string[][]): void {
  const table = [header, ...rows];
  const widths = header.map((_, i) => Math.max(...table.map((row) => (row[i] ?? '').length)));
  for (const row of table) process.stdout.write(`${row.map((c, i) => c.padEnd(widths[i]!)).join('  ').trimEnd()}\n`);
}
