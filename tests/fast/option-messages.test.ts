/**
 * How a refused option is shown in its error (validate.ts shown()), without Postgres.
 */
import { describe, expect, it } from 'vitest';
import { toJobValues } from '../../src/job-values.js';
import type { JobSpec } from '../../src/job.js';

const refusal = (spec: Record<string, unknown>): string => {
  try {
    toJobValues({ task: 't', ...spec } as JobSpec, 1024);
  } catch (err) {
    return (err as Error).message;
  }
  throw new Error('accepted');
};

describe('a refused option in its message', () => {
  it('names a boxed primitive as the object it is, not as its value (new Boolean(true) read "must be a boolean, got true")', () => {
    expect(refusal({ waitable: new Boolean(true) })).toBe('waitable must be a boolean, got a Boolean object (true)');
    expect(refusal({ priority: new Number(3) })).toMatch(/got a Number object \(3\)$/);
    expect(refusal({ jobKey: new String('k') })).toMatch(/got a String object \("k"\)$/);
  });

  it('quotes a string, so "5" is not read as 5', () => {
    expect(refusal({ delayMs: '5' })).toMatch(/got "5"$/);
    expect(refusal({ waitable: 'yes' })).toBe('waitable must be a boolean, got "yes"');
  });
});
