import type { DrainResult, ScaleSizes, SessionResult } from './session.js';

/** A Markdown table; numbers right-aligned. */
function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const numeric = header.map((_, i) => rows.every((r) => /^[\d,.–∞-]*\s*(\(.*\))?$/.test(r[i]!)));
  const line = (cells: string[]) =>
    `| ${cells.map((c, i) => (numeric[i] ? c.padStart(widths[i]!) : c.padEnd(widths[i]!))).join(' | ')} |`;
  const rule = `|${widths.map((w, i) => (numeric[i] ? `${'-'.repeat(w + 1)}:` : '-'.repeat(w + 2))).join('|')}|`;
  return [line(header), rule, ...rows.map(line)].join('\n');
}

const int = (n: number | null) => (n === null || !Number.isFinite(n) ? '–' : Math.round(n).toLocaleString('en-US'));
const dec = (n: number | null, digits = 1) => (n === null || !Number.isFinite(n) ? '–' : n.toFixed(digits));

function shape(r: SessionResult): string {
  return `${r.processes} × ${r.concurrency / r.processes}`;
}

/**
 * The drain rate the machine's cores would allow if they did nothing else: cores ÷
 * the CPU a job cost in the worker processes, Postgres and PgBouncer together. On a
 * machine shared with other work, wall-clock jobs/s swing with the others' load;
 * CPU per job swings far less, so this compares arrangements more steadily.
 */
export function cpuCeiling(d: DrainResult, cores: number): number | null {
  if (d.postgresCpuUsPerJob === null || d.pgbouncerCpuUsPerJob === null) return null;
  return (cores * 1e6) / (d.workerCpuUsPerJob + d.postgresCpuUsPerJob + d.pgbouncerCpuUsPerJob);
}

/** Drain rows: one per session and task. */
export function formatDrains(results: SessionResult[], cores: number): string {
  const rows = results.flatMap((r) =>
    r.drains.map((d) => [
      r.name,
      shape(r),
      dec(r.loadBefore),
      d.task,
      `${int(d.jobsPerSec)}${d.timedOut ? '*' : ''}`,
      int(cpuCeiling(d, cores)),
      int(d.pickUpMs),
      int(d.workerCpuUsPerJob),
      int(d.harnessCpuUsPerJob),
      int(d.postgresCpuUsPerJob),
      int(d.pgbouncerCpuUsPerJob),
      dec(d.busyCores),
      `${d.connections.serverPool} (${d.connections.serverPoolBusy})`,
      String(d.connections.listen),
      String(d.connections.allBackends),
      `${d.connections.bouncerClients} (${d.connections.bouncerWaiting})`,
      int(d.connections.bouncerMaxWaitMs),
      dec(d.claims.claimed > 0 ? d.claims.claims / (d.claims.claimed / 100) : null),
      int(d.claims.emptyClaims),
    ]),
  );
  return table(
    [
      'session',
      'processes × concurrency',
      'load before',
      'jobs',
      'jobs/s',
      `CPU ceiling jobs/s (${cores} cores)`,
      'pick-up ms',
      'worker µs/job',
      'bench µs/job',
      'Postgres µs/job',
      'PgBouncer µs/job',
      'busy cores',
      'server conns peak (busy)',
      'LISTEN conns',
      'all backends peak',
      'PgBouncer clients peak (waiting)',
      'max wait ms',
      'claims per 100 jobs',
      'empty claims',
    ],
    rows,
  );
}

/** Latency rows: one per session. */
export function formatLatency(results: SessionResult[], sizes: ScaleSizes): string {
  const rows = results.map((r) => {
    const l = r.latency;
    return [
      r.name,
      shape(r),
      String(r.listeners),
      dec(l.latencyMs.p50, 2),
      dec(l.latencyMs.p99, 2),
      dec(l.latencyMs.max, 2),
      `${l.jobsSeen}/${l.jobs}`,
      dec(l.claims.claims / l.jobs, 1),
      dec(l.claims.emptyClaims / l.jobs, 1),
      int(l.postgresCpuUsPerJob),
      int(l.workerCpuUsPerJob),
      dec(l.busyCores),
      `${l.connections.serverPool} (${l.connections.serverPoolBusy})`,
    ];
  });
  return (
    `Enqueue → handler start, idle workers, one enqueue every ${sizes.latencyIntervalMs} ms (${sizes.latencyJobs} jobs):\n` +
    table(
      [
        'session',
        'processes × concurrency',
        'LISTEN conns',
        'p50 ms',
        'p99 ms',
        'max ms',
        'started',
        'claims per job',
        'empty claims per job',
        'Postgres µs/job',
        'worker µs/job',
        'busy cores',
        'server conns peak (busy)',
      ],
      rows,
    )
  );
}
