import { describe, expect, it } from 'vitest';
import { checkBacklog, checkStuck, type BacklogRow } from '../../src/doctor/checks.js';
import { DEFAULT_THRESHOLDS } from '../../src/doctor/findings.js';

const queue = (name: string, oldestMs: number, paused = false): BacklogRow => ({
  queue: name,
  due: 3,
  oldest_ms: oldestMs,
  paused,
});

describe('checkBacklog', () => {
  it('names every queue while there are few: the worst first, then the longest waits', () => {
    const result = checkBacklog(
      [queue('fresh', 1_000), queue('late', 4_000_000), queue('held', 9_000_000, true)],
      DEFAULT_THRESHOLDS,
    );
    expect(result.status).toBe('critical');
    expect(result.summary).toBe(
      'late: 3 due, oldest waiting 67 min; held (paused): 3 due, oldest waiting 2.5 h; fresh: 3 due, oldest waiting 1.0 s',
    );
  });

  it('stays one short line with thousands of queues: the five to look at, then how many more (outside review 127)', () => {
    const rows = Array.from({ length: 3_000 }, (_, i) => queue(`q${i}`, i * 1_000));
    const result = checkBacklog(rows, DEFAULT_THRESHOLDS);
    expect(result.summary).toMatch(/^q2999: 3 due, oldest waiting [^;]+; q2998: .*; q2995: [^;]+; and 2995 more queues$/);
    expect(result.details).toHaveLength(3_000);
  });
});

describe('checkStuck', () => {
  it('says what it looked for when it found none: jobs past the warning threshold (outside review 248)', () => {
    const result = checkStuck([], { ...DEFAULT_THRESHOLDS, stuckMs: [300_000, 3_600_000] });
    expect(result.status).toBe('ok');
    expect(result.summary).toBe("no processing job without a heartbeat for 5 min or more past its worker's visibility timeout");
  });
});
