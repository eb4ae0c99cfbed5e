import type * as Amqp from 'amqplib';
import { importPeer } from '../../optional-peer.js';
import { headersProblem } from '../message.js';
import { headerValueProblem, openingRefused, refusedMessage, routingKeyProblem, unroutable } from './rabbitmq-refusals.js';
import { watchConfirmSilence } from './confirm-silence.js';
import { ConfigError } from '../../errors.js';
import { timeLimit } from '../../lifecycle/time-limit.js';
import {
  allFailed,
  asError,
  CLOSE_TIMEOUT_MS,
  openedBy,
  publisherOptions,
  mayPublish,
  notHeld,
  unreachable,
  type BrokerPublisher,
  type PublishBatchOptions,
  type PublishResult,
  type RelayMessage,
} from './publisher.js';

export interface RabbitMqPublisherOptions {
  /** amqp:// URL. Default 'amqp://guest:guest@127.0.0.1:5672'. */
  url?: string;
  /** The exchange to publish to; the destination is the routing key. Default '' (the default exchange: the queue named by the destination). */
  exchange?: string;
  /** The header that carries the message's key (null: none). Default 'sluice-key'. */
  keyHeader?: string | null;
  /**
   * How long a batch waits for the broker's confirms, in ms. Past it the connection
   * counts as dead (a silent network: no error, no close): its messages fail as
   * transient (retried with backoff) and the next batch opens a new connection.
   * Also bounds opening a connection. Default 5000: half the relay's default lease,
   * which a wait as long as the lease let run out on every partition at once
   * (outside review 184: 391 messages sent twice after a broker froze 20 s).
   */
  confirmTimeoutMs?: number;
}

/** The publisher's connection; its channels are opened as batches need them. */
interface Connection {
  model: Amqp.ChannelModel;
  /** Set when the connection closed: every channel on it failed with it. */
  closed: Error | undefined;
  /** Open channels no batch is using. */
  idle: Channel[];
  /** Every open channel, to fail when the connection goes. */
  open: Set<Channel>;
  /** When a confirm last came on any of its channels (Date.now()): the connection is alive. */
  lastConfirm: number;
  /** Gives the connection up: every confirm still awaited fails with `err`. */
  drop(err: Error): void;
}

/** A confirm channel, used by one batch at a time. */
interface Channel {
  channel: Amqp.ConfirmChannel;
  /** Set when the channel or its connection closed: every confirm still awaited failed with it. */
  closed: Error | undefined;
  /** Per message awaiting its confirm: fails it when the channel closes; `alone` when it was the only one. */
  onClose: Map<string, (err: Error, alone: boolean) => void>;
  /** Message ids the broker returned as unroutable; their confirm follows the return. */
  returned: Set<string>;
  /** Fails every confirm still awaited on it. */
  lost(err: Error): void;
}

/**
 * Publishes to RabbitMQ with `amqplib` (an optional peer: `npm install amqplib`)
 * on a confirm channel: persistent messages, `message_id` set to the message's
 * stable id, and a batch resolves when the broker has confirmed every message.
 * Messages are mandatory: one that no queue would receive is returned, a refusal
 * that counts as a try (dead letter after maxAttempts), never confirmed and lost.
 * RabbitMQ does not de-duplicate: after a relay crash between publishing and
 * recording, consumers see a message again, with the same message_id.
 */
export function rabbitMqPublisher(options: RabbitMqPublisherOptions = {}): BrokerPublisher {
  const confirmTimeoutMs = publisherOptions(
    'rabbitMqPublisher',
    options,
    ['url', 'exchange'],
    { name: 'confirmTimeoutMs', default: 5_000 },
    [],
  );
  const exchange = options.exchange ?? '';
  // AMQP carries the exchange as a short string: a longer one made every message a dead letter (outside review 184).
  if (Buffer.byteLength(exchange) > 255) throw new ConfigError('rabbitMqPublisher: exchange is longer than 255 bytes');
  const url = options.url ?? 'amqp://guest:guest@127.0.0.1:5672';
  // Parsed here, not at the first publish: a URL amqplib cannot read was retried for
  // ever as a broker outage, the relay holding its partitions (outside review 184).
  if (!/^amqps?:$/.test(protocolOf(url)))
    throw new ConfigError(
      `rabbitMqPublisher: url must be an amqp:// or amqps:// URL, got ${JSON.stringify(url.replace(/\/\/[^/@]*@/, '//'))}`,
    );
  const keyHeader = options.keyHeader === undefined ? 'sluice-key' : options.keyHeader;
  let connecting: Promise<Connection> | undefined;
  let active: Connection | undefined;
  /** Message ids of a channel closed over one of them (see openChannel), sent alone until confirmed. */
  const suspects = new Set<string>();

  const load = () => importPeer<typeof import('amqplib')>('amqplib', 'The RabbitMQ relay');
  const connect = (): Promise<Connection> =>
    (connecting ??= (async () => {
      const amqp = await load();
      const model = await amqp.connect(url, {
        timeout: confirmTimeoutMs,
      });
      const conn: Connection = {
        model,
        closed: undefined,
        idle: [],
        open: new Set(),
        lastConfirm: 0,
        drop: (err) => lost(err),
      };
      const lost = (err?: Error) => {
        if (conn.closed) return;
        conn.closed = err ?? new Error('RabbitMQ connection closed');
        if (active === conn) {
          active = undefined;
          connecting = undefined;
        }
        for (const ch of conn.open) ch.lost(conn.closed);
        // A close handshake on a silent connection would never end: the socket goes.
        destroy(model);
      };
      model.on('error', lost);
      model.on('close', lost);
      active = conn;
      return conn;
    })().catch((err: unknown) => {
      connecting = undefined;
      throw err;
    }));

  /** See watchConfirmSilence: `what` names what the connection did not do. */
  const watchSilence = (conn: Connection, since: () => number, what: string) =>
    watchConfirmSilence(conn, since, confirmTimeoutMs, (ms) => `RabbitMQ ${what} for ${ms} ms: connection given up`);

  /**
   * A channel of the batch's own. RabbitMQ refuses a message by closing its
   * channel: on a channel shared by every partition's batch, one refused message
   * failed them all, and each partition reported an innocent message with the
   * refused one's error (outside review 191).
   */
  const openChannel = async (conn: Connection): Promise<Channel> => {
    const idle = conn.idle.pop();
    if (idle) return idle;
    // Bounded as confirms are: given up only while the connection confirms nothing.
    // Under a fixed limit a broker slow to open one (throttled, busy with other
    // partitions' batches) lost the connection of every partition (outside review 197).
    const opened = Date.now();
    const watch = watchSilence(conn, () => opened, 'opened no channel and confirmed nothing');
    let channel: Amqp.ConfirmChannel;
    try {
      channel = await Promise.race([conn.model.createConfirmChannel(), watch.gaveUp]);
    } finally {
      watch.stop();
    }
    const ch: Channel = { channel, closed: undefined, onClose: new Map(), returned: new Set(), lost: (err) => lost(err) };
    // Published as mandatory: a message no queue receives comes back (before its
    // confirm) instead of being confirmed and dropped (review 46: 1,922 lost while
    // a queue was deleted for 3 s, counted as published).
    channel.on('return', (msg: Amqp.Message) => {
      const id: unknown = msg.properties.messageId;
      if (typeof id === 'string') ch.returned.add(id);
    });
    const lost = (err?: Error) => {
      if (ch.closed) return;
      ch.closed = err ?? new Error('RabbitMQ channel closed');
      conn.open.delete(ch);
      conn.idle = conn.idle.filter((other) => other !== ch);
      // Closed over a message (406) while several awaited their confirms: which one
      // is unknown, as the broker may not have confirmed those before it yet (outside
      // review 186: taken to be the first, innocent ones were blamed and dead-lettered).
      // They are suspects, sent one at a time from now on until each is confirmed.
      const alone = ch.onClose.size === 1;
      if (!alone && refusedMessage(ch.closed)) for (const id of ch.onClose.keys()) suspects.add(id);
      for (const fail of ch.onClose.values()) fail(ch.closed, alone);
      ch.onClose.clear();
    };
    channel.on('error', lost);
    channel.on('close', lost);
    conn.open.add(ch);
    return ch;
  };

  /** Publishes one message on `c` and waits for its confirm; `confirmed` is called at each. */
  const publishOne = (c: Channel, m: RelayMessage, confirmed: () => void): Promise<PublishResult> =>
    new Promise((resolve) => {
      // The broker closed the channel over a message (406, see refusedMessage) while
      // only this one awaited its confirm: it is the one, and its try counts.
      const failed = (error: Error, alone = false) => {
        if (!(alone && refusedMessage(error))) return resolve({ ok: false, error, transient: true });
        resolve({ ok: false, error, transient: false });
      };
      if (c.closed) return failed(c.closed);
      // Rows written past publish(): refused here, as amqplib would refuse more than 64 KiB of them.
      const problem = (m.headers && headersProblem(m.headers)) ?? headerValueProblem(m.headers);
      if (problem) {
        const error = new Error(`message ${m.id}: RabbitMQ cannot carry its headers: ${problem}`);
        return resolve({ ok: false, error, transient: false, unsendable: true });
      }
      c.onClose.set(m.messageId, failed);
      const headers: Record<string, string> = { ...m.headers };
      if (keyHeader && m.key !== null) headers[keyHeader] = m.key;
      const done = (err: unknown) => {
        // The channel closed with this message unconfirmed: amqplib says so before the
        // channel's 'close' reaches lost(), which fails it for the reason (a refusal
        // names it; an outage is transient). Taken for a nack, a broker restart counted
        // a try against the first message of every partition (outside review 197).
        if (err && !c.closed && asError(err).message === 'channel closed') return;
        c.onClose.delete(m.messageId);
        confirmed();
        // A nack: the queue is full (a max-length with reject-publish) or the broker
        // had an internal error. Neither is the message's fault, so it waits and is
        // retried, counting no try, as for a JetStream stream out of room: counted, a
        // full queue dead-lettered a backlog ten tries at a time (outside review 197).
        if (err) {
          const error = new Error(
            `RabbitMQ did not take the message (${asError(err).message}): a queue full (max-length, reject-publish) or a broker error`,
            { cause: err },
          );
          return resolve({ ok: false, error, transient: true });
        }
        // Returned: no queue is bound for it. It counts as a try, so a destination
        // that never routes ends in the dead letters instead of blocking for ever.
        if (c.returned.delete(m.messageId))
          return resolve({ ok: false, error: unroutable(exchange, m.destination), transient: false });
        suspects.delete(m.messageId);
        resolve({ ok: true });
      };
      try {
        const properties = { messageId: m.messageId, headers, persistent: true, mandatory: true };
        c.channel.publish(exchange, m.destination, m.payload, properties, done);
      } catch (err) {
        c.onClose.delete(m.messageId);
        // A closed channel throws IllegalOperationError: the connection's trouble. Anything
        // else is amqplib refusing to encode this message: its fault, so it counts as a try.
        const closed = Boolean(c.closed) || asError(err).name === 'IllegalOperationError';
        resolve({ ok: false, error: asError(err), transient: closed, unsendable: !closed });
      }
    });

  /**
   * Each message sent once the one before it is confirmed, so that a channel closed
   * over one of them names it. After the connection fails the rest are not sent
   * (the relay goes on from the first). Slow, and only while suspects are in the batch.
   */
  const oneByOne = async (
    c: Channel,
    messages: readonly RelayMessage[],
    waiting: () => void,
    confirmed: () => void,
    options: PublishBatchOptions | undefined,
  ): Promise<PublishResult[]> => {
    const results: PublishResult[] = [];
    for (const [i, m] of messages.entries()) {
      const last = results.at(-1);
      // The one refused is named: the rest go on, on a new channel if it closed this
      // one, and the relay records them behind it as in a batch sent at once. Left
      // unsent, the next was reported as a transient failure (outside review 189).
      if (last && !last.ok && !last.transient) return [...results, ...(await publishBatch(messages.slice(i), options))];
      if (last && !last.ok) {
        results.push({ ok: false, error: new Error('not sent: a message before it failed'), transient: true });
        continue;
      }
      if (!mayPublish(options)) {
        results.push(notHeld());
        continue;
      }
      // The confirm timeout is each message's here.
      waiting();
      results.push(await publishOne(c, m, confirmed));
    }
    return results;
  };

  /** One try at the batch on the current connection: at once, or one by one while suspects are in it. */
  const publishBatch = async (messages: readonly RelayMessage[], options?: PublishBatchOptions): Promise<PublishResult[]> => {
    let conn: Connection;
    let ch: Channel;
    try {
      conn = await connect();
      ch = await openChannel(conn);
    } catch (err) {
      return allFailed(messages.length, unreachable('RabbitMQ', openingRefused(err, url), url));
    }
    // No confirm within the timeout: the connection is silent (a network
    // blackhole sends neither an error nor a close), so it is given up, its
    // messages fail as transient, and the next batch connects anew. Without this
    // the relay waited for ever (review 48). The wait starts again at each
    // confirm on the connection, any batch's: timed over the whole batch, 50,000
    // messages on a slow broker were given up while confirms still came, and sent
    // again (outside review 191: 30% twice); timed per batch, a channel the broker
    // served last gave up the connection of every partition (review 194: 11-15% twice).
    let since = Date.now();
    const watch = watchSilence(conn, () => since, 'confirmed nothing');
    const confirmed = () => (since = conn.lastConfirm = Date.now());
    try {
      if (!messages.some((m) => suspects.has(m.messageId)))
        return await Promise.all(
          messages.map((m) => (mayPublish(options) ? publishOne(ch, m, confirmed) : Promise.resolve(notHeld()))),
        );
      return await oneByOne(ch, messages, () => (since = Date.now()), confirmed, options);
    } finally {
      watch.stop();
      if (!ch.closed && !conn.closed) conn.idle.push(ch);
    }
  };

  return {
    name: 'rabbitmq',
    refuses: routingKeyProblem,
    async prepare(): Promise<void> {
      await load();
    },
    async publish(messages: readonly RelayMessage[], options?: PublishBatchOptions): Promise<PublishResult[]> {
      const results = await publishBatch(messages, options);
      // The channel closed over one of several messages awaiting their confirms (406):
      // which one is found now, one at a time on a new channel, so the batch's failure
      // is that message's. Left to the next try, the first failure reported named an
      // innocent message, as a transient one (outside review 189).
      const suspected = results.flatMap((r, i) => (!r.ok && suspects.has(messages[i]!.messageId) ? [i] : []));
      if (suspected.length === 0) return results;
      const again = await publishBatch(
        suspected.map((i) => messages[i]!),
        options,
      );
      suspected.forEach((i, n) => (results[i] = again[n]!));
      return results;
    },
    async close(): Promise<void> {
      const deadline = Date.now() + CLOSE_TIMEOUT_MS;
      const pending = connecting;
      connecting = undefined;
      const conn = await openedBy(pending, deadline, (late) => late.drop(new Error('publisher closed')));
      if (conn && !conn.closed) {
        // Bounded: a silent connection never answers the close handshake. Then
        // every confirm still awaited (a batch stop() gave up on) fails, so its
        // timer does not keep the process alive.
        const close = conn.model.close();
        const left = Math.max(0, deadline - Date.now());
        await timeLimit(close, left, () => destroy(conn.model), 'closing', { from: 'RabbitMQ' }).catch(() => {});
        conn.drop(new Error('publisher closed'));
      }
    },
  };
}

/**
 * Closes the connection's socket at once, without the close handshake. With an
 * error: amqplib tears its connection down (heartbeat timers included) on the
 * socket's 'error' or 'end', not on a plain close, and its heartbeats then kept
 * the process alive for minutes after stop() (outside review 51).
 */
function destroy(model: Amqp.ChannelModel): void {
  const socket = (model as unknown as { connection?: { stream?: { destroy(err?: Error): void } } }).connection?.stream;
  socket?.destroy(new Error('RabbitMQ connection given up'));
}

function protocolOf(url: string): string {
  try {
    return new URL(url).protocol;
  } catch {
    return '';
  }
}
