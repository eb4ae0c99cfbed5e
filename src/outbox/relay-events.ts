import { wrapDatabaseError } from '../errors.js';
import { ListenerSafeEmitter } from '../lifecycle/listener-safe-emitter.js';
import type { RelayMessage } from './publishers/publisher.js';

export interface PartitionInfo {
  destination: string;
  partition: number;
}

export interface FailureInfo extends PartitionInfo {
  messageId: string;
  error: Error;
  /** A broker or connection that is down: not counted against the message. */
  transient: boolean;
  /** The message's refusals so far (0 for a transient failure). */
  attempts: number;
}

/** What an OutboxRelay reports; logging and RelayMetrics listen to these. */
export interface RelayEventMap {
  /** A batch is in the broker and the watermark moved past it. */
  published: [PartitionInfo & { count: number; messages: readonly RelayMessage[] }];
  /**
   * A pass found nothing more to publish. `behindHorizon`: committed messages
   * wait behind a transaction that is still running (any write transaction of
   * the cluster that began before they committed); the relay looks again soon.
   */
  caughtUp: [PartitionInfo & { behindHorizon: boolean }];
  /** This relay took a partition's lease. */
  acquired: [PartitionInfo];
  /**
   * This relay no longer holds a partition's lease: 'expired', it ran out before
   * this relay renewed it (Postgres unreachable longer than leaseMs, the process
   * stalled), said when it runs out, whether or not another relay takes it then;
   * 'taken', a renewal found another relay holding it though this relay's own
   * clock still gave it time; 'stopped', stop() gave it up. It stops publishing
   * that partition until it takes the lease again ('acquired'). `holding` always
   * agrees with these events.
   */
  lost: [PartitionInfo & { reason: 'taken' | 'expired' | 'stopped' }];
  failure: [FailureInfo];
  /** A message refused maxAttempts times moved to outbox_dead_letters. */
  deadLetter: [Omit<FailureInfo, 'transient'>];
  /** Something in the broker's setup weakens a guarantee (see BrokerPublisher.inspect); said once per destination. */
  warning: [{ destination: string; message: string }];
  /**
   * A statement failed (Postgres unreachable, ...): the relay retries with backoff.
   * A ConnectionError or DatabaseError (with the SQLSTATE), as the worker reports them.
   */
  error: [Error];
}

/** A listener that throws cannot break a relay's pass: it becomes an 'error' (a ListenerError). */
export class RelayEvents extends ListenerSafeEmitter<RelayEventMap> {
  /**
   * Emits `err` as 'error', typed as the worker's errors are (a ConnectionError for
   * a lost connection). Not when nobody listens: the relay retries anyway, and an
   * unheard 'error' would throw. (A no-op listener did that, and also kept a
   * throwing listener's error from becoming the process warning it is meant to be:
   * outside review 159.)
   */
  reportError(err: unknown): void {
    if (this.listenerCount('error') > 0) this.emit('error', wrapDatabaseError(err, 'OutboxRelay'));
  }
}
