import { ConfigError } from '../../errors.js';
import { timeLimit } from '../../lifecycle/time-limit.js';
import { checks } from '../../validate.js';
import { keyHeaderProblem } from '../message.js';
/** A message as the relay hands it to a broker. */
export interface RelayMessage {
  /** The outbox row id. */
  id: string;
  destination: string;
  key: string | null;
  headers: Record<string, string> | null;
  payload: Buffer;
  createdAt: Date;
  /**
   * Stable for the message's life, whichever relay sends it how often:
   * `<schema>:<id>`. JetStream drops a second publish with the same id within its
   * de-duplication window; RabbitMQ carries it as `message_id` for consumers to
   * de-duplicate.
   */
  messageId: string;
}

/**
 * The broker's answer for one message. `transient` failures (the broker or the
 * connection is down, a timeout) do not count against the message: the relay
 * retries with backoff. Others (the broker refused this message) count, and a
 * message refused maxAttempts times becomes a dead letter.
 */
export type PublishResult =
  | { ok: true; duplicate?: boolean }
  | {
      ok: false;
      error: Error;
      transient: boolean;
      /**
       * No try can ever send this message as it is (a subject or headers the broker
       * cannot take): it becomes a dead letter at once, not after maxAttempts tries
       * with backoff, which held its key back for a minute or more per message.
       */
      unsendable?: boolean;
    };

/** What the relay tells a publisher with each batch. */
export interface PublishBatchOptions {
  /**
   * Whether the relay still holds the batch's partition. Checked before each
   * message is sent: once false, the rest of the batch is not sent, and answered
   * with a transient failure (see notHeld). A relay stalled past its lease (a
   * frozen VM or container, SIGSTOP) went on sending its batch when it resumed,
   * after the relay that took the partition over had sent it and newer messages
   * of its keys, so a broker past its de-duplication window stored them again,
   * out of order (outside review 247).
   */
  held(): boolean;
}

/**
 * What the relay needs from a broker client: publish a batch in order and say,
 * per message, whether the broker has it. Publish asynchronously and wait for all
 * acknowledgements: the relay records progress only after the whole batch.
 */
export interface BrokerPublisher {
  /** For logs and metrics: 'nats', 'rabbitmq', ... */
  readonly name: string;
  /** `options.held()` going false mid-batch: send no more of it (a publisher that ignores it sends the rest). */
  publish(messages: readonly RelayMessage[], options?: PublishBatchOptions): Promise<PublishResult[]>;
  close(): Promise<void>;
  /** Why no message for `destination` can ever be published, or undefined: the relay refuses such a destination at once. */
  refuses?(destination: string): string | undefined;
  /**
   * Loads what publishing needs (the broker's client library) without connecting:
   * the relay's start() awaits it first. A ConfigError here (the library not
   * installed) fails the start; found at the first publish instead, it was taken
   * for a broker outage, retried for ever, and the relay kept its partitions from
   * relays that could publish (outside review 166).
   */
  prepare?(): Promise<void>;
  /**
   * What in the broker's setup for `destination` weakens the relay's guarantees,
   * or undefined: asked once a destination's first batch is in (the broker is up
   * then), and said as a 'warning' event. NATS: a stream whose duplicate_window
   * is shorter than a takeover stores a dead relay's last batch twice.
   */
  inspect?(destination: string, leaseMs: number): Promise<string | undefined>;
}

/** The answer for a message not sent because the relay's lease ran out first (PublishBatchOptions.held). */
export function notHeld(): PublishResult {
  return {
    ok: false,
    error: new Error("not sent: this relay's lease on the partition ran out while it published (stalled past it)"),
    transient: true,
  };
}

/** Whether a message may still be sent: the relay holds its partition, or said nothing. */
export function mayPublish(options: PublishBatchOptions | undefined): boolean {
  return options === undefined || options.held();
}

const checked = checks(ConfigError);

/**
 * A publisher's options, checked (ConfigError naming the bad one): names it does
 * not know refused (outside review 74: `natsPublisher({ server })` connected to the
 * default server), strings where strings go, the timeout in range. Returns the timeout.
 */
export function publisherOptions(
  what: string,
  options: object | undefined,
  strings: readonly string[],
  timeout: { name: string; default: number },
  other: readonly string[],
): number {
  if (options === null || typeof options !== 'object') throw new ConfigError(`${what}: options must be an object`);
  checked.rejectUnknownKeys(options, new Set([...strings, timeout.name, 'keyHeader', ...other]), what);
  const values = options as Record<string, unknown>;
  for (const name of strings) {
    if (values[name] !== undefined && typeof values[name] !== 'string')
      throw new ConfigError(`${what}: ${name} must be a string`);
  }
  const keyHeader = values.keyHeader;
  if (keyHeader !== undefined && keyHeader !== null) {
    if (typeof keyHeader !== 'string') throw new ConfigError(`${what}: keyHeader must be a header name, or null for none`);
    const problem = keyHeaderProblem(keyHeader);
    if (problem) throw new ConfigError(`${what}: keyHeader ${JSON.stringify(keyHeader)} ${problem}`);
  }
  return checked.intOption(`${what}: ${timeout.name}`, values[timeout.name], timeout.default, 1, 3_600_000);
}

/** Every message of a batch failed the same way (no connection to the broker). */
export function allFailed(count: number, error: Error, transient = true): PublishResult[] {
  return Array.from({ length: count }, () => ({ ok: false, error, transient }) as const);
}

/** Longest wait of a publisher's close(): for a connection still opening, then for the broker to answer the close. */
export const CLOSE_TIMEOUT_MS = 2_000;

/**
 * The connection a publisher is still opening, if it opens before `deadline`
 * (ms since epoch); one that opens later goes to `late`, which closes it.
 * close() must not wait out a connect to a broker that accepts TCP and never
 * answers (outside review 96: stop() took the whole confirmTimeoutMs, 10 or 30 s).
 */
export function openedBy<T>(pending: Promise<T> | undefined, deadline: number, late: (c: T) => void): Promise<T | undefined> {
  if (!pending) return Promise.resolve(undefined);
  const opened = timeLimit(pending, Math.max(0, deadline - Date.now()), () => void pending.then(late, () => {}), 'opening');
  return opened.catch(() => undefined);
}

/**
 * A failed connect, naming the broker's URLs without any password in them: the
 * client libraries name only the code ("CONNECTION_REFUSED", "read ECONNRESET";
 * outside reviews 95 and 99).
 */
export function unreachable(broker: string, err: unknown, urls: string | string[]): Error {
  if (err instanceof ConfigError) return err; // a missing client library says so itself
  const error = asError(err);
  const where = [urls].flat().map((url) => url.replace(/\/\/[^/@]*@/, '//'));
  return new Error(`cannot reach ${broker} at ${where.join(', ')}: ${error.message}`, { cause: error });
}

/** The error a rejected promise carried, as an Error. */
export function asError(err: unknown): Error {
  return err instanceof Error ? err : new Error(String(err));
}
