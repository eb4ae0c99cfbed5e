/**
 * Knex and MikroORM put the statement before Postgres's message (`<statement> -
 * <message>`), MikroORM with its parameters written in, and so a job's payload:
 * in every log line of a failed enqueue, and before the cause (outside review
 * 229). Given the statement as the library printed it, the message keeps only
 * Postgres's (or the driver's) words; MikroORM's " - detail: ..." lines go too (the error keeps its
 * `detail`), as the pg driver's own message has none.
 */
export function withoutStatement(err: unknown, printed: () => string | undefined): unknown {
  // Not only Postgres's errors: a lost connection ("Connection terminated", no code) too (outside review 270).
  if (!(err instanceof Error)) return err;
  let statement: string | undefined;
  try {
    statement = printed();
  } catch {
    return err;
  }
  if (statement === undefined || !err.message.startsWith(`${statement} - `)) return err;
  err.message = err.message.slice(statement.length + 3).replace(/\n - (?:detail|hint): [\s\S]*$/, '');
  // The stack was made with the old message, and MikroORM appends the stack of the
  // error it wraps, the statement in it again (outside review 231): the frames alone stay.
  if (typeof err.stack === 'string') {
    const frames = err.stack.split('\n').filter((line) => /^\s+at /.test(line));
    err.stack = [`${err.name}: ${err.message}`, ...frames].join('\n');
  }
  return err;
}
