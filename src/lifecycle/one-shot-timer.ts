/**
 * A timer that is armed or not: arming it while armed keeps the time already set,
 * so callers that each want "a pass soon" share one. It is disarmed before it fires.
 */
export class OneShotTimer {
  private timer: NodeJS.Timeout | undefined;

  /** `unref`: the timer alone does not keep the process alive. */
  constructor(
    private readonly fire: () => void,
    private readonly unref = false,
  ) {}

  get armed(): boolean {
    return this.timer !== undefined;
  }

  arm(ms: number): void {
    if (this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.fire();
    }, ms);
    if (this.unref) this.timer.unref();
  }

  clear(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }
}
