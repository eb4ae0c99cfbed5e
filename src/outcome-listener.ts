import type { Driver } from './db/driver.js';
import { doneChannelFor } from './db/identifiers.js';
import { Notifier } from './notify/listener.js';

/**
 * The Queue's one LISTEN connection for job outcomes, opened on the first
 * waitFor() and shared by all of them. Finishing statements NOTIFY the job id on
 * 'sluice:<schema>:done' (only for jobs a waiter flagged); this routes each id to
 * its waiters. NOTIFY is a hint: waiters also re-read the job on a slow poll and
 * after a reconnect, so a lost notification only delays them.
 */
export class OutcomeListener {
  private readonly notifier: Notifier;
  private readonly waiters = new Map<string, Set<() => void>>();
  private ready: Promise<void> | undefined;
  /** Ends the wait of start(): stop() during a start must not leave its waiters hanging. */
  private settleStart: (() => void) | undefined;

  /** `driver` is the Queue's: it LISTENs on a connection of its own (pg: one of the caller's pool when there is no URL). */
  constructor(driver: Driver, schema: string) {
    this.notifier = new Notifier(driver, doneChannelFor(schema));
    this.notifier.on('payload', (id) => this.waiters.get(id)?.forEach((wake) => wake()));
    // Whatever finished while LISTEN was down is found by re-reading.
    this.notifier.on('listening', () => this.waiters.forEach((set) => set.forEach((wake) => wake())));
    this.notifier.on('connectionError', () => {});
  }

  /** Resolves once LISTEN is in place (or the first attempt failed: waiters then poll). */
  start(): Promise<void> {
    this.ready ??= new Promise<void>((resolve) => {
      this.settleStart = resolve;
      this.notifier.once('listening', resolve);
      this.notifier.once('connectionError', () => resolve());
      this.notifier.start();
    });
    return this.ready;
  }

  /** Calls `wake` whenever job `id` may have finished. Returns the unsubscribe function. */
  subscribe(id: string, wake: () => void): () => void {
    let set = this.waiters.get(id);
    if (!set) this.waiters.set(id, (set = new Set()));
    set.add(wake);
    return () => {
      set.delete(wake);
      if (set.size === 0) this.waiters.delete(id);
    };
  }

  async stop(): Promise<void> {
    if (!this.ready) return;
    // Outside review 103: a close() right after the first waitFor() left that waitFor, and close(), hanging.
    this.settleStart?.();
    await this.notifier.stop();
  }
}
