/**
 * One action at a moment that can only move later: stop()'s giving up on
 * Postgres, pushed back when a step of the stop ends late. Runs at most once.
 */
export class CutOff {
  private timer: NodeJS.Timeout | undefined;
  private at = 0;
  private ran = false;

  constructor(private readonly action: () => void) {}

  /** Whether the action has run. */
  get fired(): boolean {
    return this.ran;
  }

  /** Runs the action at `at` (ms since epoch), unless it is set for later already. */
  notBefore(at: number): void {
    if (this.ran || at <= this.at) return;
    this.at = at;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.ran = true;
      this.action();
    }, at - Date.now());
  }

  clear(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }
}
