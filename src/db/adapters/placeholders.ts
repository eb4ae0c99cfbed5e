/**
 * Rewrites `$n` placeholders (what Sluice's statements use) into the `?` style of
 * Knex and MikroORM, repeating values that a statement uses more than once. A `?`
 * already in the text (a jsonb operator, a string literal) is escaped so the
 * library does not take it for a placeholder.
 */
export function toQuestionMarks(text: string, values: readonly unknown[] = []): { text: string; values: unknown[] } {
  const ordered: unknown[] = [];
  const rewritten = text.replace(/\?|\$(\d+)/g, (match, n: string | undefined) => {
    if (n === undefined) return '\\?';
    ordered.push(values[Number(n) - 1]);
    return '?';
  });
  return { text: rewritten, values: ordered };
}
