/**
 * What validatePayload makes of a Standard Schema's answer, without Postgres:
 * tests/typed-tasks.test.ts runs schemas through enqueue and the worker.
 */
import { describe, expect, it } from 'vitest';
import { ValidationError } from '../../src/errors.js';
import type { StandardSchemaV1 } from '../../src/standard-schema.js';
import { validatePayload } from '../../src/task-schemas.js';

/** A hand-made schema whose validate answers `result`. */
const answering = (result: unknown): StandardSchemaV1 =>
  ({ '~standard': { version: 1, vendor: 'hand', validate: () => result } }) as unknown as StandardSchemaV1;

const refusal = async (result: unknown): Promise<unknown> =>
  validatePayload(new Map([['t', answering(result)]]), 't', { n: 1 }).then(
    (value) => ({ accepted: value }),
    (err: unknown) => err,
  );

describe("a schema's answer (outside review 227)", () => {
  it('that is not a result object is a ValidationError saying so: null was a TypeError, 42 passed a payload of undefined', async () => {
    for (const [result, said] of [
      [null, 'null'],
      [42, '42'],
      [undefined, 'undefined'],
      [{}, '{}'],
    ] as const) {
      const err = await refusal(result);
      expect(err).toBeInstanceOf(ValidationError);
      expect((err as Error).message).toBe(
        `payload of task "t" could not be checked: its schema returned ${said}, not a Standard Schema result ({ value } or { issues })`,
      );
    }
  });

  it('that fails without issues, or with issues that cannot be read, still fails, saying so', async () => {
    const empty = await refusal({ issues: [] });
    expect(empty).toBeInstanceOf(ValidationError);
    expect((empty as Error).message).toBe(
      'payload of task "t" is invalid: its schema failed it without saying why (no issues listed)',
    );
    const unreadable = await refusal({ issues: [null] });
    expect(unreadable).toBeInstanceOf(ValidationError);
    expect((unreadable as Error).message).toBe(
      'payload of task "t" is invalid: its schema failed it with issues that cannot be read: [null]',
    );
  });

  it('that is a result is taken: its value, even undefined when said so; its issues, listed with their paths', async () => {
    expect(await refusal({ value: { n: 2 } })).toEqual({ accepted: { n: 2 } });
    expect(await refusal({ value: undefined })).toEqual({ accepted: undefined });
    const err = await refusal({
      issues: [
        { message: 'too small', path: ['n'] },
        { message: 'odd', path: [{ key: 'm' }] },
      ],
    });
    expect((err as Error).message).toBe('payload of task "t" is invalid: n: too small; m: odd');
  });
});
