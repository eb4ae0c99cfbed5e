import { describe, expect, it } from 'vitest';
import { outboxResult } from '../../src/doctor/outbox-check.js';
import type { OutboxLag } from '../../src/outbox/lag.js';

const lag = (oldestSeconds: number): OutboxLag => ({
  destination: 'orders.paid',
  partitions: 1,
  waiting: oldestSeconds > 0 ? 1 : 0,
  oldestSeconds,
  published: 10,
  relaysHolding: 1,
  lastPublishedAt: null,
  deadLetters: 0,
  failing: 0,
});

describe('outboxResult', () => {
  it('names the oldest writer when a destination is behind: an open transaction or a prepared one', () => {
    const open = outboxResult([lag(180)], {
      pid: 42,
      prepared: null,
      database: 'other',
      user: 'app',
      application: 'report',
      transaction_ms: 200_000,
    });
    expect(open.status).toBe('warn');
    expect(open.summary).toMatch(/; oldest write transaction on the server: pid 42 in database other \(report\), open /);
    // Outside review 124: a transaction left prepared held the relay back and was not named.
    const prepared = outboxResult([lag(180)], {
      pid: null,
      prepared: 'forgotten',
      database: 'other',
      user: 'app',
      application: null,
      transaction_ms: 200_000,
    });
    expect(prepared.summary).toMatch(
      /; oldest write transaction on the server: prepared transaction 'forgotten' in database other \(app\), prepared .+ ago/,
    );
    expect(prepared.advice).toMatch(/a prepared one included/);
  });

  it('says so when no writer is visible, and says nothing of writers when none is behind', () => {
    expect(outboxResult([lag(180)]).summary).toMatch(/; no write transaction open that this role can see$/);
    expect(outboxResult([lag(5)]).summary).not.toMatch(/write transaction/);
  });

  it('points at the named writer only where it named one (outside review 247)', () => {
    const writer = { pid: 42, prepared: null, database: 'other', user: 'app', application: 'report', transaction_ms: 70_000 };
    expect(outboxResult([lag(70)], writer).advice).toMatch(/\(the oldest is named above;/);
    expect(outboxResult([lag(70)]).advice).toMatch(/\(the oldest is named once a message has waited 60 s;/);
  });

  it('advises only on what it found (outside review 251)', () => {
    // A dead letter alone, with a message younger than a minute: nothing about writers or relays.
    const deadLetter = outboxResult([{ ...lag(58), deadLetters: 1 }]);
    expect(deadLetter.status).toBe('warn');
    expect(deadLetter.advice).toBe('Dead letters are in outbox_dead_letters with the broker error.');
    // Behind, with relays running, no dead letters and nothing failing.
    const behind = outboxResult([lag(180)]).advice!;
    expect(behind).toMatch(/^Old messages with relays running: /);
    expect(behind).not.toMatch(/dead letter|no relay running|outbox_failures with the last/i);
    // Waiting with no relay: start one; not a word of dead letters.
    const unattended = outboxResult([{ ...lag(5), relaysHolding: 0 }]);
    expect(unattended.status).toBe('critical');
    expect(unattended.advice).toBe(
      'A destination with messages waiting and no partition held has no relay running: start `sluice relay`.',
    );
    // Behind with no relay: start one, and the named writer would hold it back too (CI on 1257f44).
    const strandedLate = outboxResult([{ ...lag(120), relaysHolding: 0 }]).advice!;
    expect(strandedLate).toMatch(
      /^A destination with messages waiting .* A long write transaction anywhere on the server, in any database/,
    );
    expect(strandedLate).not.toMatch(/Old messages with relays running/);
    const failing = outboxResult([{ ...lag(5), failing: 2, deadLetters: 1 }]).advice!;
    expect(failing).toMatch(/^Messages the broker refused are retried .* Dead letters are in outbox_dead_letters/);
    // Each finding on its own destination: all three pieces, in order.
    const all = outboxResult([
      { ...lag(200), destination: 'a', relaysHolding: 0 },
      { ...lag(200), destination: 'b' },
      { ...lag(0), destination: 'c', deadLetters: 3 },
    ]).advice!;
    expect(all).toMatch(/^A destination with messages waiting .* Old messages with relays running: .* Dead letters are in/);
    expect(outboxResult([lag(5)]).advice).toBeUndefined();
  });
});
