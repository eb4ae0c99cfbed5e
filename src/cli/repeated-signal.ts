/**
 * Within this long of the first stop signal, another is the same request, not a
 * demand to exit at once: GNU `timeout`, or a supervisor that signals a process
 * and its process group, delivers one stop twice, milliseconds apart, and the
 * second forced the exit, running jobs abandoned to the rescuer (outside review
 * 204: 3 runs of 4 under `timeout`).
 */
export const REPEAT_WINDOW_MS = 1_000;

/**
 * Tells a stop signal that forces the exit (one after the first, past the
 * window) from the first and its echoes.
 */
export class StopSignals {
  private firstAt: number | undefined;
  private stopped = false;

  /**
   * The stop is done and the process about to exit: later signals are ignored.
   * Their handlers stay in place until then: removed, a signal in that gap met
   * Node's default and ended the process with 143 (outside review 206).
   */
  settled(): void {
    this.stopped = true;
  }

  /** 'first', 'echo' (within the window of the first, or after the stop: ignore it) or 'force'. */
  next(): 'first' | 'echo' | 'force' {
    if (this.stopped) return 'echo';
    const now = performance.now();
    if (this.firstAt === undefined) {
      this.firstAt = now;
      return 'first';
    }
    return now - this.firstAt < REPEAT_WINDOW_MS ? 'echo' : 'force';
  }
}
