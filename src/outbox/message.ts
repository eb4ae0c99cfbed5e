import { ValidationError } from '../errors.js';
import { serializePayload } from '../payload.js';
import { hasLoneSurrogate, unstorableText } from '../validate.js';

/** What a message's body may be: bytes as they are, a string (UTF-8), or anything else as JSON. */
export type OutboxPayload = Uint8Array | string | Record<string, unknown> | unknown[] | number | boolean | null;

export interface PublishOptions {
  /** Messages of one key are published in commit order, by one relay partition. */
  key?: string;
  /** Broker headers (NATS headers, RabbitMQ message headers): names and values are strings. */
  headers?: Record<string, string>;
}

/** One message as the outbox stores it. */
export interface EncodedMessage {
  destination: string;
  key: string | null;
  headers: Record<string, string> | null;
  payload: Buffer;
}

/** Longest destination (a NATS subject or a RabbitMQ routing key), in characters; the column allows 255. */
export const MAX_DESTINATION_LENGTH = 255;
export const MAX_KEY_LENGTH = 1024;
/** The default largest message: NATS's default max_payload, which counts the headers too. */
export const DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024;
/**
 * What the relay adds to a message (NATS's header preamble, Nats-Msg-Id with the
 * schema and the id, the key header's name), counted against maxMessageBytes, so a
 * message that fits when published fits the broker (review 46: a payload of
 * exactly 1 MiB passed, then was refused by NATS on every try).
 */
export const RELAY_HEADER_BYTES = 256;
/**
 * The most headers a message may carry, and the most bytes they may take
 * ("Name: value" and a line end each). Both brokers refuse much more than this
 * (amqplib encodes a message's properties in 64 KiB; NATS headers count against
 * the payload limit), and nats.js sets headers in time quadratic in their count:
 * a message with 20,000 headers, under maxMessageBytes, blocked the relay's event
 * loop past every ack timeout, retried as transient for ever (outside review 96).
 * Kept in step with outbox_message_problem() in sql/migrations/0035.
 */
export const MAX_HEADERS = 100;
export const MAX_HEADER_BYTES = 32 * 1024;
/** AMQP carries a header name as a short string (outside review 98: a 300-character name passed, then amqplib refused it). */
export const MAX_HEADER_NAME_BYTES = 255;

/** Why `headers` are too many or too large for a message, or undefined. */
export function headersProblem(headers: Record<string, unknown>): string | undefined {
  const entries = Object.entries(headers);
  if (entries.length > MAX_HEADERS) return `it has ${entries.length} headers, more than the ${MAX_HEADERS} allowed`;
  let bytes = 0;
  for (const [name, value] of entries) {
    if (Buffer.byteLength(name) > MAX_HEADER_NAME_BYTES)
      return `header name ${JSON.stringify(name.slice(0, 20) + '…')} is longer than ${MAX_HEADER_NAME_BYTES} bytes`;
    bytes += headerBytes(name, typeof value === 'string' ? value : '');
  }
  if (bytes > MAX_HEADER_BYTES) return `its headers take ${bytes} bytes, more than the ${MAX_HEADER_BYTES} allowed`;
  return undefined;
}

/** "Name: value\r\n". */
function headerBytes(name: string, value: string): number {
  return Buffer.byteLength(name) + Buffer.byteLength(value) + 4;
}

/**
 * Whether a header name is not for publish() to set: the relay's default key
 * header, every Nats-* header (JetStream's controls: the relay sets Nats-Msg-Id;
 * others such as Nats-Rollup or Nats-Expected-Stream would make the broker purge a
 * subject or refuse the message, review 63), and CC and BCC, which RabbitMQ reads
 * as more routing keys and, as a string, answers by closing the channel (outside
 * review 184: the message blocked its partition for ever). The SQL publish()
 * (outbox_message_problem() in sql/migrations/0025 and 0027) reserves the first
 * two; a CC or BCC header written from SQL becomes a dead letter at the RabbitMQ
 * relay.
 */
export function reservedHeader(name: string): boolean {
  const lower = name.toLowerCase();
  return natsReservedHeader(name) || lower === 'cc' || lower === 'bcc';
}

/**
 * The reserved names a row relayed to NATS must not carry: the key header, JetStream's
 * controls, and __proto__, which JavaScript consumers read into an object as its
 * prototype, not as a header: the message arrived without it, and nothing said so
 * (outside review 250). From SQL it becomes a dead letter at either relay.
 */
export function natsReservedHeader(name: string): boolean {
  const lower = name.toLowerCase();
  return lower === 'sluice-key' || lower.startsWith('nats-') || lower === '__proto__';
}

/** Why a reserved header name is, for the messages that refuse it. */
export const RESERVED_HEADERS =
  "Nats-* headers are JetStream's controls, CC and BCC route RabbitMQ messages, Sluice-Key carries the key, " +
  '__proto__ is lost by JavaScript consumers';

/**
 * Checks a message and turns it into the row the outbox stores. Bad input throws
 * ValidationError and nothing is written, so the caller's transaction is unharmed.
 */
export function encodeMessage(
  destination: unknown,
  payload: unknown,
  options: PublishOptions | undefined,
  maxBytes: number,
): EncodedMessage {
  if (typeof destination !== 'string' || destination.length === 0 || destination.length > MAX_DESTINATION_LENGTH) {
    throw new ValidationError(
      `publish: destination must be a string of 1 to ${MAX_DESTINATION_LENGTH} characters, got ${JSON.stringify(destination)}`,
    );
  }
  checkText('destination', destination);
  const { key, headers } = options ?? {};
  if (key !== undefined && key !== null) checkKey(key, 'publish');
  const checked = checkHeaders(headers);
  const body = toBytes(payload, maxBytes);
  const size = body.length + metadataBytes(key ?? null, checked);
  if (size > maxBytes) {
    throw new ValidationError(
      `publish: the message is ${size} bytes with its headers and key (the payload ${body.length}), ` +
        `more than the ${maxBytes} allowed (maxMessageBytes, counting ${RELAY_HEADER_BYTES} for the relay's own headers)`,
    );
  }
  return { destination, key: key ?? null, headers: checked, payload: body };
}

/** The bytes a message's key and headers take at the broker, with room for the relay's own. */
function metadataBytes(key: string | null, headers: Record<string, string> | null): number {
  let bytes = RELAY_HEADER_BYTES + (key === null ? 0 : Buffer.byteLength(key));
  for (const [name, value] of Object.entries(headers ?? {})) bytes += headerBytes(name, value);
  return bytes;
}

function toBytes(payload: unknown, maxBytes: number): Buffer {
  if (payload instanceof Uint8Array) return Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength);
  if (typeof payload === 'string') {
    // UTF-8 has no lone surrogate: Buffer.from would write U+FFFD in its place (review 46).
    if (hasLoneSurrogate(payload))
      throw new ValidationError('publish: payload contains a lone UTF-16 surrogate, which UTF-8 cannot encode');
    return Buffer.from(payload, 'utf8');
  }
  if (payload === undefined) throw new ValidationError('publish: payload is required (use null for an empty JSON body)');
  // The jobs' checked serialiser: refuses what JSON would drop or mangle (an
  // ArrayBuffer or a Uint16Array became {} or an object keyed by index, review 46).
  return Buffer.from(serializePayload(payload, maxBytes, 'publish: payload'), 'utf8');
}

// NATS and AMQP header names are tokens: no control characters, spaces or colons.
const HEADER_NAME = /^[!#-'*+\-.0-9A-Z^_`a-z|~]+$/;

/**
 * Why `name` cannot carry a message's key (a publisher's keyHeader), or undefined:
 * not a token, or a Nats-* control (outside review 77: keyHeader 'Nats-Rollup' made
 * every keyed message purge its subject).
 */
export function keyHeaderProblem(name: string): string | undefined {
  if (!HEADER_NAME.test(name)) return 'is not a header name (a token: no spaces, colons or control characters)';
  // An AMQP field name is a short string: a longer one failed every keyed message (outside review 152).
  if (name.length > MAX_HEADER_NAME_BYTES) return `is longer than ${MAX_HEADER_NAME_BYTES} bytes`;
  if (name.toLowerCase().startsWith('nats-')) return "is reserved (Nats-* headers are JetStream's controls)";
  return undefined;
}

function checkHeaders(headers: unknown): Record<string, string> | null {
  if (headers === undefined || headers === null) return null;
  // A plain object: a Map (or any class instance) has no own entries to read and was stored as no headers.
  const proto: unknown = typeof headers === 'object' ? Object.getPrototypeOf(headers) : undefined;
  if (typeof headers !== 'object' || (proto !== Object.prototype && proto !== null)) {
    throw new ValidationError('publish: headers must be a plain object of strings');
  }
  const entries = Object.entries(headers);
  for (const [name, value] of entries) {
    if (!HEADER_NAME.test(name)) throw new ValidationError(`publish: header name ${JSON.stringify(name)} is not a token`);
    if (reservedHeader(name)) {
      throw new ValidationError(`publish: header ${name} is reserved (${RESERVED_HEADERS})`);
    }
    if (typeof value !== 'string') throw new ValidationError(`publish: header ${name} must be a string`);
    if (/[\r\n]/.test(value)) throw new ValidationError(`publish: header ${name} contains a line break`);
    checkText(`header ${name}`, value);
  }
  const problem = headersProblem(headers as Record<string, string>);
  if (problem) throw new ValidationError(`publish: ${problem}`);
  return entries.length > 0 ? (headers as Record<string, string>) : null;
}

function checkText(what: string, text: string, caller = 'publish'): void {
  const unstorable = unstorableText(text);
  if (unstorable) throw new ValidationError(`${caller}: ${what} contains ${unstorable}`);
}

/** Throws a ValidationError (from `caller`) unless `key` is a key a message may carry. */
export function checkKey(key: unknown, caller: string): asserts key is string {
  if (typeof key !== 'string' || key.length > MAX_KEY_LENGTH) {
    throw new ValidationError(`${caller}: key must be a string of at most ${MAX_KEY_LENGTH} characters`);
  }
  checkText('key', key, caller);
  // It travels as a header (Sluice-Key), which cannot hold one (NATS refuses it).
  if (/[\r\n]/.test(key)) throw new ValidationError(`${caller}: key contains a line break`);
}
