/** `work`'s value, or undefined as soon as `signal` fires. */
export function unlessStopped<T>(work: Promise<T>, signal: AbortSignal): Promise<T | undefined> {
  if (signal.aborted) return Promise.resolve(undefined);
  return new Promise((resolve, reject) => {
    const stopped = () => resolve(undefined);
    signal.addEventListener('abort', stopped, { once: true });
    work.then(resolve, reject).finally(() => signal.removeEventListener('abort', stopped));
  });
}
