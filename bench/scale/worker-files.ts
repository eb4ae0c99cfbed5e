import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';

/** The fetch-loop counters of every worker process of a session, summed (see Worker.stats). */
export interface ClaimStats {
  cycles: number;
  claims: number;
  emptyClaims: number;
  claimed: number;
}

/** What the worker processes of a session wrote (bench/scale/sluice-scaled.mjs explains why files). */
export interface WorkerFiles {
  claims: ClaimStats;
  /** Latency job number → when its handler started. */
  latencyStarts: Map<number, number>;
  /** Drain block (job number / 1e8) → the earliest handler start in it over all processes. */
  firstStarts: Map<number, number>;
  /** The largest peak RSS of one process. */
  maxRssBytes: number;
}

interface WorkerFile {
  stats: ClaimStats;
  latencyStarts: [number, number][];
  firstStarts: Record<string, number>;
  maxRssBytes: number;
}

/** Reads and merges the files of every worker process in `dir`. */
export async function readWorkerFiles(dir: string): Promise<WorkerFiles> {
  const merged: WorkerFiles = {
    claims: { cycles: 0, claims: 0, emptyClaims: 0, claimed: 0 },
    latencyStarts: new Map(),
    firstStarts: new Map(),
    maxRssBytes: 0,
  };
  for (const name of await readdir(dir)) {
    if (!name.endsWith('.json')) continue;
    // Renamed into place by the writer: complete, or not there yet.
    const file = JSON.parse(await readFile(join(dir, name), 'utf8')) as WorkerFile;
    for (const key of Object.keys(merged.claims) as (keyof ClaimStats)[]) merged.claims[key] += file.stats[key];
    for (const [i, at] of file.latencyStarts) merged.latencyStarts.set(i, at);
    for (const [block, at] of Object.entries(file.firstStarts)) {
      merged.firstStarts.set(Number(block), Math.min(at, merged.firstStarts.get(Number(block)) ?? Infinity));
    }
    merged.maxRssBytes = Math.max(merged.maxRssBytes, file.maxRssBytes);
  }
  return merged;
}

export function claimsDelta(before: ClaimStats, after: ClaimStats): ClaimStats {
  return {
    cycles: after.cycles - before.cycles,
    claims: after.claims - before.claims,
    emptyClaims: after.emptyClaims - before.emptyClaims,
    claimed: after.claimed - before.claimed,
  };
}
