import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import type pg from 'pg';

let ticksPerSecond: number | undefined;
export function clockTicks(): number {
  if (ticksPerSecond === undefined) {
    try {
      ticksPerSecond = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
    } catch {
      ticksPerSecond = 100;
    }
  }
  return ticksPerSecond;
}

/** user + system CPU of a process in clock ticks, or null when it cannot be read. */
export function processTicks(pid: number): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (which may hold spaces), from field 3 on.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return Number(fields[11]) + Number(fields[12]);
  } catch {
    return null;
  }
}

/**
 * CPU time the Postgres backends serving one application spent, read from /proc:
 * the benchmark tags a system's worker connections with `application_name`, and
 * samples the backends' user + system time at the start, every 200 ms (so a
 * backend that closes its connection early still counts, up to its last sample),
 * and at the end. Only backends count, not the WAL writer or checkpointer. Null
 * when Postgres does not run on this machine (its backends are not in /proc).
 */
export class BackendCpu {
  private readonly baseline = new Map<number, number>();
  private readonly latest = new Map<number, number>();
  private timer: NodeJS.Timeout | undefined;
  private readable = true;

  private constructor(private readonly pool: pg.Pool, private readonly applicationName: string) {}

  static async start(pool: pg.Pool, applicationName: string): Promise<BackendCpu> {
    const cpu = new BackendCpu(pool, applicationName);
    await cpu.sample(true);
    cpu.timer = setInterval(() => void cpu.sample(false).catch(() => {}), 200);
    return cpu;
  }

  /** Stops sampling; CPU µs spent since the start, or null if it could not be read. */
  async stop(): Promise<number | null> {
    clearInterval(this.timer);
    await this.sample(false);
    if (!this.readable || this.latest.size === 0) return null;
    let ticks = 0;
    for (const [pid, t] of this.latest) ticks += t - (this.baseline.get(pid) ?? 0);
    return (ticks / clockTicks()) * 1e6;
  }

  private async sample(first: boolean): Promise<void> {
    const { rows } = await this.pool.query<{ pid: number }>(
      'SELECT pid FROM pg_stat_activity WHERE application_name = $1', [this.applicationName]);
    for (const { pid } of rows) {
      const ticks = processTicks(pid);
      if (ticks === null) {
        this.readable = false;
        continue;
      }
      if (first) this.baseline.set(pid, ticks);
      this.latest.set(pid, ticks);
    }
  }
}

/** `url` with `application_name` set, so the backends serving it can be told apart. */
export function taggedUrl(url: string, applicationName: string): string {
  const u = new URL(url);
  u.searchParams.set('application_name', applicationName);
  return u.toString();
}
