import { OneShotTimer } from '../lifecycle/one-shot-timer.js';
import type { RelayEvents } from './relay-events.js';

/** Why a lease stopped being held: another relay took it, it ran out unrenewed, or stop() gave it up. */
export type LeaseLoss = 'taken' | 'expired' | 'stopped';

/**
 * One partition's lease as its relay knows it: held until a time, by the clock of
 * the statement that took or renewed it, and said 'acquired' and 'lost' once each
 * time, so that `holding` and the events agree (outside reviews 96, 98 and 99).
 */
export class PartitionLease {
  private heldUntil = 0;
  /** Fires when the lease runs out unrenewed: 'lost' is said then, as `held` turns false (see checkExpiry). */
  private readonly expiry = new OneShotTimer(() => this.expiryDue(), true);

  constructor(
    private readonly destination: string,
    private readonly partition: number,
    private readonly events: RelayEvents,
    /** Called as the lease is said lost, before the event. */
    private readonly onLost: () => void,
  ) {}

  /** True while the lease is held (by the time of its last renewal). */
  get held(): boolean {
    return Date.now() < this.heldUntil;
  }

  /** Taken and not said lost since (it may have run out by the clock: see checkExpiry). */
  get taken(): boolean {
    return this.heldUntil > 0;
  }

  /** Milliseconds until it runs out (negative once it has). */
  get leftMs(): number {
    return this.heldUntil - Date.now();
  }

  /**
   * The lease is this relay's until `sentAt` (when the statement that took or
   * renewed it was sent) plus `heldMs` (leaseMs, and what the statement waited
   * before it wrote the lease: Postgres counts the lease from the write, and the
   * statement's transaction began no earlier than it was sent); 'acquired' when it was not held
   * (or was said lost while the statement was out).
   */
  renewed(sentAt: number, heldMs: number): void {
    const wasHeld = this.taken;
    this.heldUntil = sentAt + heldMs;
    this.expiry.clear();
    this.expiry.arm(Math.max(0, this.leftMs) + 1);
    if (!wasHeld) this.events.emit('acquired', { destination: this.destination, partition: this.partition });
  }

  /** Said once per lease held: not again when its expiry was said while a renewal was out. */
  lost(reason: LeaseLoss): void {
    if (!this.taken) return;
    this.heldUntil = 0;
    this.onLost();
    this.expiry.clear();
    this.events.emit('lost', { destination: this.destination, partition: this.partition, reason });
  }

  /**
   * A lease that ran out before this relay could renew it (Postgres unreachable
   * longer than leaseMs, the process stalled) is lost, and said so at once, so
   * that `holding` and the events agree: another relay may take it. Taken again,
   * it is 'acquired' again (outside reviews 96 and 98).
   */
  checkExpiry(): void {
    if (this.taken && !this.held) this.lost('expired');
  }

  /**
   * The expiry timer: Node counts a timer from the event loop's cached time, which
   * on a busy loop is behind Date.now() when the timer is armed, so it may fire
   * before the lease has run out by the clock `held` reads. Armed again for what is
   * left: fired early and dropped, the lease was never said lost while a renewal
   * waited behind a lock, and the relay went on as if it held it (its test, under load).
   */
  private expiryDue(): void {
    if (this.taken && this.held) this.expiry.arm(this.leftMs + 1);
    else this.checkExpiry();
  }
}
