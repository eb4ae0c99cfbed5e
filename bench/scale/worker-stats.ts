import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';

/** The fetch-loop counters of every worker process of a session, summed (see Worker.stats). */
export interface ClaimStats {
  cycles: number;
  claims: number;
  emptyClaims: number;
  claimed: number;
}

/**
 * Sums the counters the worker processes write to `dir` (bench/scale/sluice-scaled.mjs,
 * one file per process, rewritten every 250 ms while they change). Files, not IPC:
 * bench/lib/processes.ts reports the counters only when a worker stops, and a session
 * keeps its workers through several phases.
 */
export async function readStats(dir: string): Promise<ClaimStats> {
  const total: ClaimStats = { cycles: 0, claims: 0, emptyClaims: 0, claimed: 0 };
  for (const name of await readdir(dir)) {
    if (!name.endsWith('.json')) continue;
    let stats: Partial<ClaimStats>;
    try {
      stats = JSON.parse(await readFile(join(dir, name), 'utf8')) as Partial<ClaimStats>;
    } catch {
      continue; // being rewritten (renamed into place, so only before its first write)
    }
    for (const key of Object.keys(total) as (keyof ClaimStats)[]) total[key] += stats[key] ?? 0;
  }
  return total;
}

export function statsDelta(before: ClaimStats, after: ClaimStats): ClaimStats {
  return {
    cycles: after.cycles - before.cycles,
    claims: after.claims - before.claims,
    emptyClaims: after.emptyClaims - before.emptyClaims,
    claimed: after.claimed - before.claimed,
  };
}
