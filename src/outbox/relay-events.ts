import { EventEmitter } from 'node:events';
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
  /** This relay found its lease taken by another relay (it had expired): it stops publishing that partition. */
  lost: [PartitionInfo];
  failure: [FailureInfo];
  /** A message refused maxAttempts times moved to outbox_dead_letters. */
  deadLetter: [Omit<FailureInfo, 'transient'>];
  /** A statement failed (Postgres unreachable, ...): the relay retries with backoff. */
  error: [Error];
}

export class RelayEvents extends EventEmitter<RelayEventMap> {
  constructor() {
    super();
    // An 'error' nobody listens to must not crash the process: the relay retries anyway.
    this.on('error', () => {});
  }
}
