/**
 * A copy of `items` in a random order (Fisher-Yates): contenders that take turns
 * in a new order each round, so none is always first after the others warmed the
 * server up, or always last.
 */
export function shuffled<T>(items: readonly T[]): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}
