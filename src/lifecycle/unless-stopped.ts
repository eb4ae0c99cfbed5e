/**
 * `work`'s value, or undefined once `signal` has fired and `graceMs` more have
 * passed without it.
 */
export function unlessStopped<T>(work: Promise<T>, signal: AbortSignal, graceMs = 0): Promise<T | undefined> {
  return new Promise((resolve, reject) => {
    let timer: NodeJS.Timeout | undefined;
    const stopped = () => {
      if (graceMs <= 0) resolve(undefined);
      else timer = setTimeout(() => resolve(undefined), graceMs);
    };
    if (signal.aborted) stopped();
    else signal.addEventListener('abort', stopped, { once: true });
    work.then(resolve, reject).finally(() => {
      signal.removeEventListener('abort', stopped);
      clearTimeout(timer);
    });
  });
}
