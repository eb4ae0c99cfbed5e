/**
 * Makes a statement builder build once per schema: the texts depend on nothing
 * but the schema, and some callers (the admin API per request, metrics per
 * scrape) would otherwise rebuild them on every call. The result is frozen, so
 * no caller can change a text another caller shares. An invalid schema throws
 * (from quoteSchema) and is not cached.
 */
export function perSchema<T extends object>(build: (schema: string) => T): (schema: string) => Readonly<T> {
  const built = new Map<string, Readonly<T>>();
  return (schema) => {
    let statements = built.get(schema);
    if (!statements) {
      statements = Object.freeze(build(schema));
      built.set(schema, statements);
    }
    return statements;
  };
}
