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

/**
 * Why `destination` can be no routing key, or undefined. AMQP carries it as a short
 * string, at most 255 bytes: publish() counts 255 characters, and a longer key in
 * bytes (accented, CJK) made every message a dead letter, named by amqplib as "the
 * wrong type" (outside review 271).
 */
export function routingKeyProblem(destination: string): string | undefined {
  const bytes = Buffer.byteLength(destination);
  return bytes > 255 ? `a RabbitMQ routing key is at most 255 bytes, and it is ${bytes} (in UTF-8)` : undefined;
}

/**
 * A connect the broker closed while opening it, said with its likely reason: amqplib
 * says only "Expected ConnectionOpenOk; got <ConnectionClose channel:0>" for a vhost
 * that does not exist or that the user may not use (outside review 271).
 */
export function openingRefused(err: unknown, url: string): unknown {
  if (!(err instanceof Error) || !err.message.startsWith('Expected ConnectionOpenOk; got <ConnectionClose')) return err;
  const path = new URL(url).pathname.slice(1);
  let vhost = path;
  try {
    vhost = decodeURIComponent(path);
  } catch {
    // A malformed escape is named as written.
  }
  vhost ||= '/';
  return new Error(
    `RabbitMQ closed the connection as it opened: the vhost ${JSON.stringify(vhost)} does not exist, or the user may not use it (${err.message})`,
    { cause: err },
  );
}
