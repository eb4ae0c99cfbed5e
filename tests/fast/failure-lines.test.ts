/**
 * FailureLines: which relay failures `sluice relay` logs. One line per
 * partition's error until that partition publishes again, whatever other
 * destinations fail in between (outside review 95).
 */
import { describe, expect, it } from 'vitest';
import { FailureLines } from '../../src/cli/failure-lines.js';

const failure = (destination: string, message: string, partition = 0) => ({
  destination,
  partition,
  messageId: 'm',
  error: new Error(message),
  transient: true,
  attempts: 0,
});

describe('FailureLines', () => {
  it("logs a partition's repeated error once, though other destinations fail in between", () => {
    const lines = new FailureLines();
    const logged = [
      failure('a', 'no stream'),
      failure('b', 'too big'),
      failure('a', 'no stream'),
      failure('b', 'too big'),
      failure('a', 'no stream'),
      failure('a', 'no stream', 1),
    ].map((f) => lines.shouldLog(f));
    expect(logged).toEqual([true, true, false, false, false, true]);
  });

  it('logs it again after the partition published a batch, or when its error changes', () => {
    const lines = new FailureLines();
    expect(lines.shouldLog(failure('a', 'down'))).toBe(true);
    // published() says whether the partition had a failure logged: `sluice relay` then logs `recovered` (outside review 198).
    expect(lines.published({ destination: 'b', partition: 0 })).toBe(false);
    expect(lines.shouldLog(failure('a', 'down'))).toBe(false);
    expect(lines.published({ destination: 'a', partition: 0 })).toBe(true);
    expect(lines.published({ destination: 'a', partition: 0 })).toBe(false);
    expect(lines.shouldLog(failure('a', 'down'))).toBe(true);
    expect(lines.shouldLog(failure('a', 'refused'))).toBe(true);
  });
});
