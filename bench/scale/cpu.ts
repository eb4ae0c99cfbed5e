import { readFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { clockTicks, processTicks } from '../lib/postgres-cpu.js';

/** user + system CPU time of a process so far, µs (null: not readable, e.g. not on this machine). */
export function processCpuUs(pid: number): number | null {
  const ticks = processTicks(pid);
  return ticks === null ? null : (ticks / clockTicks()) * 1e6;
}

/**
 * The whole machine's busy and total CPU ticks so far (/proc/stat, every core):
 * other load on the machine counts too, which is the point on a shared 2-core box,
 * where the question is whether the machine, not Sluice, set the limit.
 */
export function machineTicks(): { busy: number; total: number } | null {
  try {
    const line = readFileSync('/proc/stat', 'utf8').split('\n')[0]!;
    const [user, nice, system, idle, iowait, irq, softirq, steal] = line.trim().split(/\s+/).slice(1).map(Number);
    const busy = user! + nice! + system! + irq! + softirq! + steal!;
    return { busy, total: busy + idle! + iowait! };
  } catch {
    return null;
  }
}

/** Share of the machine's CPU that was busy between two readings, in cores (0 to the core count). */
export function busyCores(before: ReturnType<typeof machineTicks>, after: ReturnType<typeof machineTicks>): number | null {
  if (!before || !after || after.total === before.total) return null;
  return ((after.busy - before.busy) / (after.total - before.total)) * cpus().length;
}
