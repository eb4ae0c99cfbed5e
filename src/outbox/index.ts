// The outbox's public surface, re-exported by src/index.ts.
export { Outbox, type OutboxOptions, type OutboxMessage, type PublishCallOptions } from './outbox.js';
export type { OutboxPayload } from './message.js';
export { OutboxRelay } from './relay.js';
export type { OutboxRelayOptions, DestinationOption } from './relay-options.js';
export type { RelayEventMap } from './relay-events.js';
export { outboxLag, type OutboxLag } from './lag.js';
export {
  listOutboxDeadLetters,
  redriveOutboxDeadLetters,
  dropOutboxDeadLetters,
  type OutboxDeadLetter,
  type OutboxDeadLetterTarget,
} from './dead-letters.js';
export type { BrokerPublisher, PublishBatchOptions, RelayMessage, PublishResult } from './publishers/publisher.js';
export { natsPublisher, type NatsPublisherOptions } from './publishers/nats.js';
export { rabbitMqPublisher, type RabbitMqPublisherOptions } from './publishers/rabbitmq.js';
