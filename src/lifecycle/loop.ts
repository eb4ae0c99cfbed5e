import { Backoff, type BackoffOptions } from './backoff.js';

export interface LoopOptions<R = void> {
  /**
   * One pass. Passes never overlap. `signal` fires on stop(): a pass that may run
   * long should give up when it does.
   */
  pass: (signal: AbortSignal) => R | Promise<R>;
  /**
   * From the end of a pass to the start of the next, in ms: fixed, or computed
   * from the pass's result (cron sleeps until its next tick; `undefined` before the
   * first pass and after a failed one). Infinity: only when asked (trigger, runSoon).
   */
  intervalMs: number | ((result: R | undefined) => number);
  /**
   * Each interval is multiplied by a factor drawn uniformly from [low, high], so
   * that workers started together do not keep acting together.
   */
  jitter?: readonly [low: number, high: number];
  /**
   * After a failed pass, wait this backoff's next delay instead of the interval;
   * a pass that succeeds starts it over. Without it, a failed pass waits the interval.
   */
  backoff?: BackoffOptions;
  /** A pass threw (not reported once stop() aborted it: it was told to give up). */
  onError?: (err: unknown) => void;
  /** For tests: the jitter's and the backoff's random draws. */
  random?: () => number;
}

/** setTimeout fires at once when given more than this (about 24.8 days). */
const MAX_TIMEOUT_MS = 2 ** 31 - 1;

/**
 * The lifecycle every background loop of Sluice shares (heartbeat, fetch loop
 * poll, queue state refresh, lease campaign, maintenance services, LISTEN
 * reconnects): run a pass, wait an interval, run the next.
 *
 * - Passes never overlap: a pass asked for while one runs follows it, and every
 *   such request made during one pass is folded into that one follow-up.
 * - start() arms the first pass one interval ahead; trigger() runs one now;
 *   runSoon(ms) makes the next pass come no later than ms from now. trigger() and
 *   runSoon() work before start() too (one pass; start() alone arms the interval).
 * - stop() resolves once the pass in flight has ended; nothing runs after it.
 * - Timers are unref'd: a loop never keeps the process alive.
 *
 * @example
 *   const poll = new Loop({ pass: () => wake(), intervalMs: 2_000, jitter: [0.75, 1.25] });
 *   poll.start();
 *   await poll.stop();
 */
export class Loop<R = void> {
  private started = false;
  private stopped = false;
  private timer: NodeJS.Timeout | undefined;
  /** performance.now() at which the armed timer fires; Infinity when none is armed. */
  private timerAt = Infinity;
  /** Set before a pass starts, so that a pass asking for another (synchronously, too) is folded. */
  private running = false;
  /** The pass in flight, and the follow-ups asked for during it. */
  private inFlight: Promise<void> | undefined;
  /** trigger() during a pass: one more pass right after it; resolves when that one ends. */
  private followUp: { promise: Promise<void>; resolve: () => void } | undefined;
  /** runSoon() during a pass: the latest time the next pass may start. */
  private soonAt = Infinity;
  private readonly abort = new AbortController();
  private readonly backoff: Backoff | undefined;
  private readonly random: () => number;
  private lastFailed = false;

  constructor(private readonly options: LoopOptions<R>) {
    this.random = options.random ?? Math.random;
    this.backoff = options.backoff && new Backoff(options.backoff, this.random);
  }

  /** True once stop() was called. */
  get isStopped(): boolean {
    return this.stopped;
  }

  /** The last pass failed and a backoff delays the next: a runSoon() now would cut it short. */
  get backingOff(): boolean {
    return this.lastFailed && this.backoff !== undefined;
  }

  /** Arms the first pass one interval from now, and one after every pass from then on. */
  start(): void {
    if (this.started || this.stopped) return;
    this.started = true;
    if (!this.running) this.armAt(performance.now() + this.interval(undefined));
  }

  /**
   * Runs a pass now, or right after the one in flight. Resolves when that pass has
   * ended (at once after stop()); never rejects: errors go to onError.
   */
  trigger(): Promise<void> {
    if (this.stopped) return Promise.resolve();
    if (this.running) {
      if (!this.followUp) {
        let resolve!: () => void;
        const promise = new Promise<void>((r) => (resolve = r));
        this.followUp = { promise, resolve };
      }
      return this.followUp.promise;
    }
    this.running = true;
    this.inFlight = this.drive();
    return this.inFlight;
  }

  /** The next pass starts within `ms` from now (sooner if it was due sooner). */
  runSoon(ms = 0): void {
    if (this.stopped) return;
    const at = performance.now() + Math.max(0, ms);
    if (this.running) this.soonAt = Math.min(this.soonAt, at);
    else this.armAt(at);
  }

  /**
   * The next pass comes after the backoff's delay, as after a failed pass: for
   * work that a pass set up and that failed later (a LISTEN connection it opened
   * was lost).
   */
  retry(): void {
    this.runSoon(this.backoff ? this.backoff.next() : 0);
  }

  /** Fires the pass's signal; resolves once the pass in flight has ended. Nothing runs after. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.disarm();
    this.abort.abort();
    await this.inFlight;
  }

  /** Runs a pass and the follow-ups asked for meanwhile, then arms the next. */
  private async drive(): Promise<void> {
    this.disarm();
    let delay = await this.once();
    while (this.followUp && !this.stopped) {
      const asked = this.followUp;
      this.followUp = undefined;
      delay = await this.once();
      asked.resolve();
    }
    // Stopped: the follow-up will not run, but its caller must not wait forever.
    this.followUp?.resolve();
    this.followUp = undefined;
    this.running = false;
    this.inFlight = undefined;
    if (this.stopped) return;
    const soon = this.soonAt;
    this.soonAt = Infinity;
    if (this.started) this.armAt(performance.now() + delay);
    this.armAt(soon);
  }

  /** One pass; returns the delay before the next. */
  private async once(): Promise<number> {
    // A pass starting now satisfies every earlier runSoon().
    this.soonAt = Infinity;
    try {
      const result = await this.options.pass(this.abort.signal);
      this.backoff?.reset();
      this.lastFailed = false;
      return this.interval(result);
    } catch (err) {
      this.lastFailed = true;
      if (!this.abort.signal.aborted) this.options.onError?.(err);
      return this.backoff ? this.backoff.next() : this.interval(undefined);
    }
  }

  private interval(result: R | undefined): number {
    const { intervalMs, jitter } = this.options;
    const ms = typeof intervalMs === 'number' ? intervalMs : intervalMs(result);
    if (!jitter) return ms;
    const [low, high] = jitter;
    return ms * (low + this.random() * (high - low));
  }

  /** Makes sure a pass starts by `at` (performance.now()); a later or infinite time changes nothing. */
  private armAt(at: number): void {
    if (this.stopped || !(at < this.timerAt)) return;
    clearTimeout(this.timer);
    this.timerAt = at;
    this.timer = setTimeout(
      () => {
        this.timer = undefined;
        this.timerAt = Infinity;
        void this.trigger();
      },
      Math.min(MAX_TIMEOUT_MS, Math.max(0, at - performance.now())),
    );
    this.timer.unref();
  }

  private disarm(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.timerAt = Infinity;
  }
}
