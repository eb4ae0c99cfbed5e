/**
 * How a validated batch is sent (enqueueBatch), without Postgres:
 * tests/enqueue.test.ts runs the statements.
 */
import { describe, expect, it } from 'vitest';
import { enqueueBatch, sized } from '../../src/enqueue-batch.js';
import { ValidationError } from '../../src/errors.js';
import { toJobValues, type JobValues } from '../../src/job-values.js';
import type { JobSpec } from '../../src/job.js';

const values = (specs: JobSpec[]): JobValues[] => specs.map((spec) => toJobValues(spec, 64 * 1024 * 1024));

describe('enqueueBatch', () => {
  it('sends one queue and one set of options as two JSON arrays, text parameters only', () => {
    const batch = enqueueBatch(
      values([{ task: 'a', payload: { quote: 'say "hi"', back: 'c:\\x' } }, { task: 'b', payload: null }, { task: 'a' }]),
    );
    expect(batch.statement).toBe('enqueueManyUniform');
    const [queue, tasks, payloads, maxAttempts, priority, group, trace] = batch.params('{"t":1}');
    expect([queue, maxAttempts, priority, group, trace]).toEqual(['default', 5, 0, null, '{"t":1}']);
    expect(JSON.parse(tasks as string)).toEqual(['a', 'b', 'a']);
    // The payloads' own text, spliced: JSON.parse gives them back as given.
    expect(JSON.parse(payloads as string)).toEqual([{ quote: 'say "hi"', back: 'c:\\x' }, null, {}]);
  });

  it('sends any other batch as one JSON document, and keyed jobs through enqueue_job()', () => {
    expect(enqueueBatch(values([{ task: 'a' }, { task: 'a', delayMs: 5 }])).statement).toBe('enqueueMany');
    expect(enqueueBatch(values([{ task: 'a' }, { task: 'a', queue: 'other' }])).statement).toBe('enqueueMany');
    expect(enqueueBatch(values([{ task: 'a' }, { task: 'a', jobKey: 'k' }])).statement).toBe('enqueueManyKeyed');
    expect(() =>
      enqueueBatch(
        values([
          { task: 'a', jobKey: 'k' },
          { task: 'b', jobKey: 'k' },
        ]),
      ),
    ).toThrow(ValidationError);
  });

  it('sends a batch whose payloads hold more than 32 Mi characters as the JSON document (json, not jsonb: no 255 MB cap)', () => {
    const big = 'x'.repeat(8 * 1024 * 1024);
    const four = values(Array.from({ length: 4 }, () => ({ task: 'a', payload: big })));
    // Four payloads of 8 Mi characters and their quotes: just over.
    expect(enqueueBatch(four).statement).toBe('enqueueMany');
    expect(enqueueBatch(four.slice(0, 3)).statement).toBe('enqueueManyUniform');
  });

  it('refuses, before anything is sent, a batch whose text a Postgres message cannot carry or a string cannot hold (outside review 142)', () => {
    // Counted in UTF-8 bytes: 4 characters of three bytes each are 12.
    expect(sized(() => '€€€€', '', 12)).toBe('€€€€');
    expect(() => sized(() => '€€€€', 'x', 12)).toThrow(
      /^enqueueMany: the batch is 13 bytes of JSON, over the 12 bytes .*split it/,
    );
    expect(() =>
      sized(() => {
        throw new RangeError('Invalid string length');
      }),
    ).toThrow(ValidationError);
    expect(() =>
      sized(() => {
        throw new TypeError('not about size');
      }),
    ).toThrow(TypeError);
  });
});
