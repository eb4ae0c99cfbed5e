/** A mistake in how the command was called: printed as one line, exit code 2. */
export class UsageError extends Error {}

/** Prints a value as one line of JSON (for --json output). */
export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value)}\n`);
}
