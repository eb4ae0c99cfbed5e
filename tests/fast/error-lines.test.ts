/**
 * ErrorLines: which errors `sluice worker` and `sluice relay` log while Postgres
 * is down (outside reviews 96 and 97: a line per retry of every loop).
 */
import { describe, expect, it } from 'vitest';
import { ErrorLines } from '../../src/cli/error-lines.js';

describe('ErrorLines', () => {
  it('logs each error once until a minute passed (with the count since) or the command got through again', () => {
    const lines = new ErrorLines(60_000);
    const refused = 'connect ECONNREFUSED';
    const starting = 'the database system is starting up';
    expect(lines.next(refused, 0)).toEqual({ repeated: 0 });
    expect(lines.next(refused, 1_000)).toBeUndefined();
    expect(lines.next(starting, 2_000)).toEqual({ repeated: 0 });
    expect(lines.next(refused, 3_000)).toBeUndefined();
    expect(lines.next(refused, 61_000)).toEqual({ repeated: 2 });
    expect(lines.next(refused, 62_000)).toBeUndefined();
    expect(lines.wentThrough()).toBe(true);
    expect(lines.wentThrough()).toBe(false);
    expect(lines.next(refused, 63_000)).toEqual({ repeated: 0 });
  });
});
