/**
 * Which of a long-running command's errors it logs (`sluice worker`, `sluice
 * relay`). While Postgres is down every loop reports every retry: about ten
 * lines per outage from a relay, 31 in 4 s from a worker (outside reviews 96 and
 * 97). An error is logged once, then again only after `everyMs` (with how many
 * times it came meanwhile) or once the command got through again.
 */
export class ErrorLines {
  private readonly seen = new Map<string, { at: number; repeats: number }>();

  constructor(private readonly everyMs = 60_000) {}

  /**
   * Undefined when `message` repeats one logged less than `everyMs` ago (counted);
   * otherwise how many times it came since its last line.
   */
  next(message: string, now = Date.now()): { repeated: number } | undefined {
    const last = this.seen.get(message);
    if (last && now - last.at < this.everyMs) {
      last.repeats++;
      return undefined;
    }
    this.seen.set(message, { at: now, repeats: 0 });
    return { repeated: last?.repeats ?? 0 };
  }

  /** The command got through again: true when errors were logged since (it recovered). */
  wentThrough(): boolean {
    if (this.seen.size === 0) return false;
    this.seen.clear();
    return true;
  }
}
