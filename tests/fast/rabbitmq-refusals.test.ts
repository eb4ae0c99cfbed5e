import { describe, expect, it } from 'vitest';
import { openingRefused, routingKeyProblem } from '../../src/outbox/publishers/rabbitmq-refusals.js';

describe('RabbitMQ refusals', () => {
  it("names the vhost of a connect closed as it opened, however the URL's path is escaped (outside review 271)", () => {
    const closed = new Error('Expected ConnectionOpenOk; got <ConnectionClose channel:0>');
    const said = (url: string) => (openingRefused(closed, url) as Error).message;
    expect(said('amqp://u:p@h/sales')).toMatch(/^RabbitMQ closed the connection as it opened: the vhost "sales" does not exist/);
    expect(said('amqp://h/%2Fa')).toContain('the vhost "/a"');
    expect(said('amqp://h')).toContain('the vhost "/"');
    // A malformed escape is named as written, not a URIError thrown out of the publish.
    expect(said('amqp://h/%E0%A4%A')).toContain('the vhost "%E0%A4%A"');
    // Any other error goes through as it is.
    const other = new Error('connect ECONNREFUSED');
    expect(openingRefused(other, 'amqp://h/x')).toBe(other);
  });

  it('refuses a routing key over 255 bytes of UTF-8, not 255 characters', () => {
    expect(routingKeyProblem('e'.repeat(255))).toBeUndefined();
    expect(routingKeyProblem('é'.repeat(128))).toBe('a RabbitMQ routing key is at most 255 bytes, and it is 256 (in UTF-8)');
  });
});
