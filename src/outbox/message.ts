import { ValidationError } from '../errors.js';
import { unstorableText } from '../validate.js';

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
/** The default largest payload: NATS's default max_payload. */
export const DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024;

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
  if (key !== undefined && key !== null) {
    if (typeof key !== 'string' || key.length > MAX_KEY_LENGTH) {
      throw new ValidationError(`publish: key must be a string of at most ${MAX_KEY_LENGTH} characters`);
    }
    checkText('key', key);
  }
  const body = toBytes(payload);
  if (body.length > maxBytes) {
    throw new ValidationError(`publish: payload is ${body.length} bytes, more than the ${maxBytes} allowed (maxMessageBytes)`);
  }
  return { destination, key: key ?? null, headers: checkHeaders(headers), payload: body };
}

function toBytes(payload: unknown): Buffer {
  if (payload instanceof Uint8Array) return Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength);
  if (typeof payload === 'string') return Buffer.from(payload, 'utf8');
  if (payload === undefined) throw new ValidationError('publish: payload is required (use null for an empty JSON body)');
  let json: string | undefined;
  try {
    json = JSON.stringify(payload);
  } catch (err) {
    throw new ValidationError(`publish: payload is not JSON-serialisable: ${(err as Error).message}`, { cause: err });
  }
  if (json === undefined) throw new ValidationError(`publish: payload of type ${typeof payload} is not JSON`);
  return Buffer.from(json, 'utf8');
}

// NATS and AMQP header names are tokens: no control characters, spaces or colons.
const HEADER_NAME = /^[!#-'*+\-.0-9A-Z^_`a-z|~]+$/;

function checkHeaders(headers: unknown): Record<string, string> | null {
  if (headers === undefined || headers === null) return null;
  if (typeof headers !== 'object' || Array.isArray(headers)) throw new ValidationError('publish: headers must be an object');
  const entries = Object.entries(headers);
  for (const [name, value] of entries) {
    if (!HEADER_NAME.test(name)) throw new ValidationError(`publish: header name ${JSON.stringify(name)} is not a token`);
    if (typeof value !== 'string') throw new ValidationError(`publish: header ${name} must be a string`);
    if (/[\r\n]/.test(value)) throw new ValidationError(`publish: header ${name} contains a line break`);
    checkText(`header ${name}`, value);
  }
  return entries.length > 0 ? (headers as Record<string, string>) : null;
}

function checkText(what: string, text: string): void {
  const unstorable = unstorableText(text);
  if (unstorable) throw new ValidationError(`publish: ${what} contains ${unstorable}`);
}
