/**
 * WorkerLog, the lines `sluice worker` prints: a connection error once per
 * outage, not per retry, without "error error:", and a line when Postgres is
 * back (outside review 97: 31 lines in 4 s and no word of recovery).
 */
import { EventEmitter } from 'node:events';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { WorkerLog } from '../../src/cli/worker-log.js';
import { ConnectionError } from '../../src/errors.js';
import type { Worker } from '../../src/worker/worker.js';

afterEach(() => vi.restoreAllMocks());

function captured(): string[] {
  const lines: string[] = [];
  const keep = (chunk: string | Uint8Array) => (lines.push(String(chunk).replace(/^\S+ /, '').trimEnd()), true);
  vi.spyOn(process.stdout, 'write').mockImplementation(keep);
  vi.spyOn(process.stderr, 'write').mockImplementation(keep);
  return lines;
}

describe('WorkerLog', () => {
  it('logs a repeated connection error once until the worker reconnects, then says so', () => {
    const lines = captured();
    const worker = new EventEmitter();
    new WorkerLog(false).follow(worker as unknown as Worker);
    const refused = new ConnectionError('worker: connect ECONNREFUSED 127.0.0.1:5432');
    for (let i = 0; i < 5; i++) worker.emit('error', refused);
    worker.emit('reconnected', { downMs: 4321.4 });
    worker.emit('error', refused);
    expect(lines).toEqual([
      'error worker: connect ECONNREFUSED 127.0.0.1:5432',
      'reconnected after=4321ms',
      'error worker: connect ECONNREFUSED 127.0.0.1:5432',
    ]);
  });

  it('names the jobs a stop handed back, and running jobs given back for a held row; not jobs claimed ahead', () => {
    const lines = captured();
    const worker = new EventEmitter();
    new WorkerLog(false).follow(worker as unknown as Worker);
    worker.emit('jobs:handed-back', [{ id: '7' }], { reason: 'overdue' });
    worker.emit('jobs:handed-back', [{ id: '8' }, { id: '9' }], { reason: 'stopping' });
    worker.emit('jobs:handed-back', [{ id: '10' }], { reason: 'row-held' });
    expect(lines).toEqual(['handed-back count=2 ids=8,9 reason=stopping', 'handed-back count=1 ids=10 reason=row-held']);
  });

  it('says a thrown object as last_error says it, not [object Object] (outside review 126)', () => {
    const lines = captured();
    const worker = new EventEmitter();
    new WorkerLog(false).follow(worker as unknown as Worker);
    const job = { id: '5', task: 'charge', queue: 'default', attempts: 1 };
    worker.emit('job:fail', job, { error: { code: 42 }, willRetry: false, durationMs: 3 });
    worker.emit('job:fail', job, { error: new Error('declined'), willRetry: true, durationMs: 3 });
    expect(lines[0]).toContain('error: non-Error thrown: {"code":42}');
    expect(lines[1]).toContain('error: declined');
  });

  it('escapes names in text lines, so a line break in one forges no line; JSON lines keep them (outside review 252)', () => {
    const lines = captured();
    const worker = new EventEmitter();
    const forged = 'x\n2026-01-01T00:00:00.000Z completed fake #1 queue=default';
    new WorkerLog(false).follow(worker as unknown as Worker);
    worker.emit('job:complete', { id: '5', task: forged, queue: 'ab\u202eq', attempts: 1 }, { durationMs: 2 });
    expect(lines).toEqual([
      'completed "x\\n2026-01-01T00:00:00.000Z completed fake #1 queue=default" #5 queue="ab\\u202eq" attempt=1 took=2ms',
    ]);
    expect(new WorkerLog(false).names(['a', 'b\nc'])).toBe('a,"b\\nc"');
    expect(new WorkerLog(true).names(['a', 'b\nc'])).toBe('a,b\nc');
  });
});

describe('WorkerLog with hostile text', () => {
  it('escapes control codes of error messages and of the logger lines, so none reaches the terminal (outside reviews 265 and 266)', () => {
    const lines = captured();
    const worker = new EventEmitter();
    const log = new WorkerLog(false);
    log.follow(worker as unknown as Worker);
    const job = { id: '6', task: 'fail', queue: 'default', attempts: 1 };
    worker.emit('job:fail', job, {
      error: new Error('before\x1b[2J\x1b]0;PWNED\x07\rafter\u202e'),
      willRetry: false,
      durationMs: 1,
    });
    log.logger().warn({ queue: 'default' }, '1 due jobs of task "evil\ncompleted send_welcome #999" wait');
    expect(lines).toEqual([
      'failed fail #6 queue=default attempt=1 took=1ms error: before\\u001b[2J\\u001b]0;PWNED\\u0007\\u000dafter\\u202e',
      'warn 1 due jobs of task "evil\\u000acompleted send_welcome #999" wait',
    ]);
    expect(lines.join('')).not.toMatch(/[\x00-\x1f\u202e]/);
  });
});
