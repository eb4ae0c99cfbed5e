/** Collects the messages of the process warnings with `code` until `stop()`. */
export function captureWarnings(code: string): { readonly messages: string[]; settled(): Promise<string[]>; stop(): void } {
  const messages: string[] = [];
  const onWarning = (w: Error & { code?: string }) => {
    if (w.code === code) messages.push(w.message);
  };
  process.on('warning', onWarning);
  return {
    messages,
    /** The messages so far, once those emitted by now have arrived (emitWarning delivers them on the next tick). */
    async settled() {
      await new Promise((resolve) => setImmediate(resolve));
      return [...messages];
    },
    stop: () => process.off('warning', onWarning),
  };
}
