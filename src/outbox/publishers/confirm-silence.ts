/** What a silence watch needs of a broker connection. */
export interface ConfirmingConnection {
  /** When a confirm last came on any of its channels (Date.now()). */
  lastConfirm: number;
  /** Gives the connection up: every confirm still awaited fails with `err`. */
  drop(err: Error): void;
}

/**
 * Gives `conn` up once nothing was confirmed on it, by any batch, for `timeoutMs`
 * since `since()`: the network went silent (a blackhole sends neither an error nor
 * a close). `gaveUp` rejects then, with the error `message(timeoutMs)` names.
 */
export function watchConfirmSilence(
  conn: ConfirmingConnection,
  since: () => number,
  timeoutMs: number,
  message: (timeoutMs: number) => string,
): { gaveUp: Promise<never>; stop(): void } {
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  let giveUp: (err: Error) => void = () => {};
  const gaveUp = new Promise<never>((_, reject) => (giveUp = reject));
  gaveUp.catch(() => {});
  const quiet = () => Date.now() - Math.max(since(), conn.lastConfirm);
  const check = () => {
    if (quiet() < timeoutMs) return arm(timeoutMs - quiet());
    // Timers run before the loop reads its sockets: after the process was busy or
    // starved, confirms already received are still unread. Judged again once they
    // are (in CI, a loaded machine gave up four healthy channels at once).
    setImmediate(() => {
      if (stopped) return;
      if (quiet() < timeoutMs) return arm(timeoutMs - quiet());
      const err = new Error(message(timeoutMs));
      conn.drop(err);
      giveUp(err);
    }).unref();
  };
  const arm = (ms: number) => {
    timer = setTimeout(check, ms);
    timer.unref();
  };
  arm(timeoutMs);
  return {
    gaveUp,
    stop: () => {
      stopped = true;
      clearTimeout(timer);
    },
  };
}
