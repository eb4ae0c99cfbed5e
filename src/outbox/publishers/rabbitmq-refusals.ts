/** How RabbitMQ refuses a message, and what it must not be sent. */
import { RESERVED_HEADERS, reservedHeader } from '../message.js';

/**
 * RabbitMQ closed the channel with 406 PRECONDITION_FAILED: it refused a message
 * (larger than its max_message_size, a CC header that is not an array). Taken for
 * the connection's trouble, such a message was retried for ever and held its
 * partition (outside review 184).
 */
export function refusedMessage(error: Error): boolean {
  return (error as { code?: unknown }).code === 406;
}

/**
 * Headers written into the outbox past publish() that RabbitMQ must not get: a
 * reserved name (a CC array copied the message to another queue, a Sluice-Key
 * header spoofed the key) or a value that is not a string.
 */
export function headerValueProblem(headers: Record<string, unknown> | null): string | undefined {
  for (const [name, value] of Object.entries(headers ?? {})) {
    if (reservedHeader(name)) return `header ${name} is reserved (${RESERVED_HEADERS})`;
    if (typeof value !== 'string') return `header ${name} is not a string`;
  }
  return undefined;
}

export function unroutable(exchange: string, routingKey: string): Error {
  const where =
    exchange === '' ? `no queue named "${routingKey}"` : `no queue bound to exchange "${exchange}" for "${routingKey}"`;
  return new Error(`RabbitMQ returned the message as unroutable: ${where}`);
}
