import type * as Amqp from 'amqplib';
import { importPeer } from '../../optional-peer.js';
import { allFailed, asError, type BrokerPublisher, type PublishResult, type RelayMessage } from './publisher.js';

export interface RabbitMqPublisherOptions {
  /** amqp:// URL. Default 'amqp://guest:guest@127.0.0.1:5672'. */
  url?: string;
  /** The exchange to publish to; the destination is the routing key. Default '' (the default exchange: the queue named by the destination). */
  exchange?: string;
  /** The header that carries the message's key (null: none). Default 'sluice-key'. */
  keyHeader?: string | null;
}

interface Connected {
  model: Amqp.ChannelModel;
  channel: Amqp.ConfirmChannel;
  /** Set when the channel or connection closed: every confirm still awaited fails with it. */
  closed: Error | undefined;
  onClose: Set<(err: Error) => void>;
}

/**
 * Publishes to RabbitMQ with `amqplib` (an optional peer: `npm install amqplib`)
 * on a confirm channel: persistent messages, `message_id` set to the message's
 * stable id, and a batch resolves when the broker has confirmed every message.
 * RabbitMQ does not de-duplicate: after a relay crash between publishing and
 * recording, consumers see a message again, with the same message_id.
 */
export function rabbitMqPublisher(options: RabbitMqPublisherOptions = {}): BrokerPublisher {
  const exchange = options.exchange ?? '';
  const keyHeader = options.keyHeader === undefined ? 'sluice-key' : options.keyHeader;
  let connecting: Promise<Connected> | undefined;
  let active: Connected | undefined;

  const connect = (): Promise<Connected> =>
    (connecting ??= (async () => {
      const amqp = await importPeer('amqplib', 'The RabbitMQ relay', () => import('amqplib'));
      const model = await amqp.connect(options.url ?? 'amqp://guest:guest@127.0.0.1:5672');
      const channel = await model.createConfirmChannel();
      const c: Connected = { model, channel, closed: undefined, onClose: new Set() };
      const lost = (err?: Error) => {
        if (c.closed) return;
        c.closed = err ?? new Error('RabbitMQ channel closed');
        if (active === c) {
          active = undefined;
          connecting = undefined;
        }
        for (const fail of c.onClose) fail(c.closed);
        c.onClose.clear();
        void model.close().catch(() => {});
      };
      model.on('error', lost);
      model.on('close', lost);
      channel.on('error', lost);
      channel.on('close', lost);
      active = c;
      return c;
    })().catch((err: unknown) => {
      connecting = undefined;
      throw err;
    }));

  const publishOne = (c: Connected, m: RelayMessage): Promise<PublishResult> =>
    new Promise((resolve) => {
      const failed = (error: Error) => resolve({ ok: false, error, transient: true });
      if (c.closed) return failed(c.closed);
      c.onClose.add(failed);
      const headers: Record<string, string> = { ...m.headers };
      if (keyHeader && m.key !== null) headers[keyHeader] = m.key;
      const done = (err: unknown) => {
        c.onClose.delete(failed);
        // A nack: the broker could not take this message (it counts as a try).
        resolve(err ? { ok: false, error: asError(err), transient: Boolean(c.closed) } : { ok: true });
      };
      try {
        c.channel.publish(exchange, m.destination, m.payload, { messageId: m.messageId, headers, persistent: true }, done);
      } catch (err) {
        c.onClose.delete(failed);
        resolve({ ok: false, error: asError(err), transient: true });
      }
    });

  return {
    name: 'rabbitmq',
    async publish(messages: readonly RelayMessage[]): Promise<PublishResult[]> {
      let c: Connected;
      try {
        c = await connect();
      } catch (err) {
        return allFailed(messages.length, asError(err));
      }
      return Promise.all(messages.map((m) => publishOne(c, m)));
    },
    async close(): Promise<void> {
      const pending = connecting;
      connecting = undefined;
      const c = await pending?.catch(() => undefined);
      if (c && !c.closed) {
        c.closed = new Error('publisher closed');
        await c.model.close().catch(() => {});
      }
    },
  };
}
