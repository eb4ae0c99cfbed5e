/**
 * MaintenanceRunner and ServiceRunner on a fake clock, with the lease row kept in
 * memory: the leader runs its services right after the election and then every
 * interval; it stops them when it loses the lease, and steps down on its own when
 * renewals hang; stop() waits for runs in flight and hands the lease over.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { Queryable } from '../../src/db/executor.js';
import { maintenanceStatements } from '../../src/db/statements/maintenance.js';
import { Lease } from '../../src/maintenance/lease.js';
import { MaintenanceRunner, ServiceRunner, type MaintenanceService } from '../../src/maintenance/runner.js';

const LEASE_MS = 3_000;
const queries = maintenanceStatements('m');

/** The leader table of one role, as acquireLease and resignLease treat it. */
class LeaseTable implements Queryable {
  row: { holder: string; expiresAt: number } | undefined;
  statements = 0;
  /** Statements wait for this while set (a database that stopped answering). */
  hang: Promise<void> | undefined;
  fail = 0;

  async query(text: string, values: unknown[] = []): Promise<{ rows: any[] }> {
    this.statements++;
    if (this.hang) await this.hang;
    if (this.fail > 0) {
      this.fail--;
      throw new Error('connection reset');
    }
    const [holder, , leaseMs] = values as [string, string, number];
    if (text === queries.resignLease) {
      if (this.row?.holder === holder) this.row = undefined;
      return { rows: [] };
    }
    if (text !== queries.acquireLease) throw new Error(`unexpected statement: ${text}`);
    if (this.row && this.row.holder !== holder && this.row.expiresAt > Date.now()) return { rows: [] };
    this.row = { holder, expiresAt: Date.now() + leaseMs };
    return { rows: [this.row] };
  }
}

let table: LeaseTable;
let events: string[];
let runner: MaintenanceRunner;

function service(
  name: string,
  intervalMs = 1_000,
  run: (signal: AbortSignal) => Promise<void> = async () => {},
): MaintenanceService & { runs: number[] } {
  const runs: number[] = [];
  return { name, intervalMs, runs, run: (signal) => (runs.push(Date.now()), run(signal)) };
}

function newRunner(services: MaintenanceService[], holder = 'w1'): MaintenanceRunner {
  const r = new MaintenanceRunner(new Lease(table, queries, holder, LEASE_MS), services);
  for (const e of ['leader:elected', 'leader:lost'] as const) r.on(e, () => events.push(`${holder} ${e}`));
  r.on('task:error', (name, err) => events.push(`${holder} task:error ${name} ${(err as Error).message}`));
  r.on('lease:error', (err) => events.push(`${holder} lease:error ${(err as Error).message}`));
  return r;
}

beforeEach(() => {
  vi.useFakeTimers();
  table = new LeaseTable();
  events = [];
});
afterEach(async () => {
  table.hang = undefined;
  await runner?.stop();
  vi.useRealTimers();
});

describe('MaintenanceRunner', () => {
  it('is elected at start, runs each service right away, then every interval ±25%', async () => {
    const rescuer = service('rescuer', 1_000);
    const t0 = Date.now();
    runner = newRunner([rescuer]);
    runner.start();
    await vi.advanceTimersByTimeAsync(0);
    expect(runner.isLeader).toBe(true);
    expect(events).toEqual(['w1 leader:elected']);
    await vi.advanceTimersByTimeAsync(20_000);
    const gaps = rescuer.runs.map((t, i) => t - (rescuer.runs[i - 1] ?? t0));
    expect(gaps[0]).toBe(0);
    for (const gap of gaps.slice(1)) {
      expect(gap).toBeGreaterThanOrEqual(750);
      expect(gap).toBeLessThanOrEqual(1_250);
    }
  });

  it('renews the lease at most a third of it apart', async () => {
    runner = newRunner([]);
    runner.start();
    await vi.advanceTimersByTimeAsync(0);
    const renewals: number[] = [];
    for (let i = 0; i < 20; i++) {
      const before = table.statements;
      await vi.advanceTimersByTimeAsync(100);
      if (table.statements > before) renewals.push(Date.now());
    }
    expect(renewals.length).toBeGreaterThanOrEqual(2);
    for (let i = 1; i < renewals.length; i++) expect(renewals[i]! - renewals[i - 1]!).toBeLessThanOrEqual(LEASE_MS / 3);
  });

  it('only one of two workers leads; the other takes over once a stopped leader resigns', async () => {
    runner = newRunner([service('a')], 'w1');
    runner.start();
    await vi.advanceTimersByTimeAsync(0);
    const second = newRunner([service('a')], 'w2');
    second.start();
    await vi.advanceTimersByTimeAsync(5_000);
    expect([runner.isLeader, second.isLeader]).toEqual([true, false]);
    await runner.stop();
    expect(table.row).toBeUndefined();
    await vi.advanceTimersByTimeAsync(LEASE_MS / 3);
    expect(second.isLeader).toBe(true);
    runner = second;
  });

  it('stops its services (their signal fires) when another worker holds the lease', async () => {
    let signal: AbortSignal | undefined;
    const slow = service('slow', 1_000, (s) => {
      signal = s;
      return new Promise<void>((resolve) => s.addEventListener('abort', () => resolve()));
    });
    runner = newRunner([slow]);
    runner.start();
    await vi.advanceTimersByTimeAsync(0);
    table.row = { holder: 'usurper', expiresAt: Date.now() + 60_000 };
    await vi.advanceTimersByTimeAsync(LEASE_MS / 3);
    expect(runner.isLeader).toBe(false);
    expect(signal?.aborted).toBe(true);
    expect(events).toEqual(['w1 leader:elected', 'w1 leader:lost']);
    const runs = slow.runs.length;
    await vi.advanceTimersByTimeAsync(10_000);
    expect(slow.runs).toHaveLength(runs);
    await runner.stop();
    expect(table.row?.holder).toBe('usurper');
  });

  it('steps down when renewals hang, as soon as its lease runs out locally (before anyone could take it)', async () => {
    runner = newRunner([service('a')]);
    runner.start();
    await vi.advanceTimersByTimeAsync(0);
    const expiresAt = table.row!.expiresAt;
    let answer!: () => void;
    table.hang = new Promise<void>((resolve) => (answer = resolve));
    await vi.advanceTimersByTimeAsync(expiresAt - Date.now() - 1);
    expect(runner.isLeader).toBe(true);
    await vi.advanceTimersByTimeAsync(1);
    expect(runner.isLeader).toBe(false);
    expect(Date.now()).toBeLessThanOrEqual(expiresAt);
    answer();
    table.hang = undefined;
  });

  it('keeps leading through a failed renewal while its last one is still valid', async () => {
    runner = newRunner([]);
    runner.start();
    await vi.advanceTimersByTimeAsync(0);
    table.fail = 1;
    await vi.advanceTimersByTimeAsync(LEASE_MS / 3);
    expect(events).toContain('w1 lease:error connection reset');
    expect(runner.isLeader).toBe(true);
    await vi.advanceTimersByTimeAsync(LEASE_MS * 3);
    expect(runner.isLeader).toBe(true);
  });

  it('reports a service that threw, and runs it again at its next interval', async () => {
    let calls = 0;
    const flaky = service('flaky', 1_000, async () => {
      if (++calls === 1) throw new Error('boom');
    });
    runner = newRunner([flaky]);
    runner.start();
    await vi.advanceTimersByTimeAsync(1_250);
    expect(events).toContain('w1 task:error flaky boom');
    expect(flaky.runs.length).toBeGreaterThanOrEqual(2);
  });

  it('stop() waits for the run in flight, resigns, and nothing runs after', async () => {
    let finish!: () => void;
    const slow = service('slow', 1_000, () => new Promise<void>((resolve) => (finish = resolve)));
    runner = newRunner([slow]);
    runner.start();
    await vi.advanceTimersByTimeAsync(0);
    let stopped = false;
    const stop = runner.stop().then(() => (stopped = true));
    await vi.advanceTimersByTimeAsync(100);
    expect(stopped).toBe(false);
    finish();
    await stop;
    expect(table.row).toBeUndefined();
    const statements = table.statements;
    await vi.advanceTimersByTimeAsync(60_000);
    expect(slow.runs).toHaveLength(1);
    expect(table.statements).toBe(statements);
  });
});

describe('ServiceRunner', () => {
  it('awaits setup in start(), runs at once, then sleeps exactly what the run returned', async () => {
    const log: string[] = [];
    const sleeps = [500, 2_000];
    const t0 = Date.now();
    const cronLike: MaintenanceService<number> = {
      name: 'cron',
      setup: async () => void log.push('setup'),
      intervalMs: (sleep) => sleep ?? 1_000,
      run: async () => {
        log.push(`run ${Date.now() - t0}`);
        return sleeps.shift() ?? 60_000;
      },
    };
    const s = new ServiceRunner(cronLike, () => {});
    await s.start();
    expect(log).toEqual(['setup', 'run 0']);
    await vi.advanceTimersByTimeAsync(2_500);
    expect(log).toEqual(['setup', 'run 0', 'run 500', 'run 2500']);
    await s.stop();
  });

  it('reports a failed setup and runs all the same', async () => {
    const errors: unknown[] = [];
    let runs = 0;
    const s = new ServiceRunner(
      {
        name: 'x',
        intervalMs: 1_000,
        setup: async () => {
          throw new Error('no table');
        },
        run: async () => void runs++,
      },
      (err) => errors.push(err),
    );
    await s.start();
    expect([errors.length, runs]).toEqual([1, 1]);
    await s.stop();
  });
});
