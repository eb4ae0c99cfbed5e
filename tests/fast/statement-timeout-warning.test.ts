import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Worker } from '../../src/index.js';
import { resolveWorkerConfig } from '../../src/worker/options.js';

// Made, never started: the warning is the constructor's, and no connection is opened.
const make = (options: { visibilityTimeoutMs?: number; statementTimeoutMs?: number }) =>
  new Worker({ connectionString: 'postgres://nobody@127.0.0.1:1/none', tasks: { t: async () => {} }, ...options });

describe('SLUICE_STATEMENT_TIMEOUT', () => {
  const warnings: string[] = [];
  const onWarning = (w: Error & { code?: string }) => {
    if (w.code === 'SLUICE_STATEMENT_TIMEOUT') warnings.push(w.message);
  };
  beforeEach(() => void process.on('warning', onWarning));
  afterEach(() => void process.off('warning', onWarning));

  it('warns once when statements may outlast the locks (outside review 247), not for the defaults', async () => {
    make({});
    make({ visibilityTimeoutMs: 6_000, statementTimeoutMs: 5_000 });
    make({ visibilityTimeoutMs: 30_000, statementTimeoutMs: 30_000 });
    // Left out, the statement timeout stays within a short visibility timeout (outside review 279).
    make({ visibilityTimeoutMs: 6_000 });
    // Warnings are emitted on the next tick.
    await new Promise((resolve) => setImmediate(resolve));
    expect(warnings).toEqual([]);
    make({ visibilityTimeoutMs: 6_000, statementTimeoutMs: 30_000 });
    make({ visibilityTimeoutMs: 5_000, statementTimeoutMs: 9_000 });
    await new Promise((resolve) => setImmediate(resolve));
    expect(warnings).toEqual([
      'Worker: statementTimeoutMs (30000) is above visibilityTimeoutMs (6000): a statement held by a silent network can ' +
        "outlast its jobs' locks, and the rescuer take them while their results wait. Give statementTimeoutMs a value below visibilityTimeoutMs",
    ]);
  });

  it('defaults the statement timeout to 30 s, or to the visibility timeout when that is shorter, not under 5 s', () => {
    const resolved = (options: { visibilityTimeoutMs?: number; statementTimeoutMs?: number }) =>
      resolveWorkerConfig({ connectionString: 'postgres://nobody@127.0.0.1:1/none', tasks: { t: async () => {} }, ...options })
        .statementTimeoutMs;
    expect(resolved({})).toBe(30_000);
    expect(resolved({ visibilityTimeoutMs: 6_000 })).toBe(6_000);
    // Not under 5 s (then the warning says so).
    expect(resolved({ visibilityTimeoutMs: 1_000 })).toBe(5_000);
    expect(resolved({ visibilityTimeoutMs: 120_000 })).toBe(30_000);
    expect(resolved({ visibilityTimeoutMs: 6_000, statementTimeoutMs: 20_000 })).toBe(20_000);
  });
});
