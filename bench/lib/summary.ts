import type { DrainRun } from '../scenarios/drain.js';
import type { EnqueueRun } from '../scenarios/enqueue.js';
import type { LatencyRun } from '../scenarios/latency.js';
import type { SteadyRun } from '../scenarios/steady.js';
import type { BenchSizes, Row } from './context.js';
import { median } from './stats.js';
import type { System } from './systems.js';

/** Every run of one system, over all repetitions. */
export interface SystemRuns {
  system: System;
  enqueue: EnqueueRun[];
  drain: DrainRun[];
  latency: LatencyRun[];
  steady: SteadyRun[];
}

const MB = 2 ** 20;
const round = (n: number, digits = 0) => Math.round(n * 10 ** digits) / 10 ** digits;
const med = <T>(runs: T[], value: (run: T) => number) => median(runs.map(value));

/** The runs of one drain configuration. */
export function drainRuns(runs: SystemRuns, size: number, concurrency: number): DrainRun[] {
  return runs.drain.filter((r) => r.size === size && r.concurrency === concurrency);
}

/**
 * Sluice's own table (medians over the repetitions), every jobs/s row also shown as
 * a share of the SQL-only limit; its single and bulk enqueue beside the seed
 * pattern's plain SQL.
 */
export function sluiceRows(sluice: SystemRuns, seed: SystemRuns | undefined, sizes: BenchSizes): Row[] {
  const rows: Row[] = [];
  const callers = `${sizes.enqueueCallers} callers`;
  if (sluice.enqueue.length) {
    const single = med(sluice.enqueue, (r) => r.singleJobsPerSec);
    const bulk = med(sluice.enqueue, (r) => r.bulkJobsPerSec);
    rows.push({ scenario: 'enqueue', metric: `single, ${callers}`, value: single, unit: 'jobs/s' });
    if (seed?.enqueue.length) {
      const seedSingle = med(seed.enqueue, (r) => r.singleJobsPerSec);
      rows.push(
        { scenario: 'enqueue', metric: `seed pattern: INSERT with a per-row NOTIFY trigger, ${callers}`, value: seedSingle, unit: 'jobs/s' },
        { scenario: 'enqueue', metric: 'single as a share of the seed INSERT', value: round((single / seedSingle) * 100, 1), unit: '%' },
      );
    }
    rows.push({ scenario: 'enqueue', metric: `bulk, batches of ${sizes.bulkBatch}`, value: bulk, unit: 'jobs/s' });
    if (seed?.enqueue.length) {
      const seedBulk = med(seed.enqueue, (r) => r.bulkJobsPerSec);
      rows.push(
        { scenario: 'enqueue', metric: `seed pattern: unnest INSERT, batches of ${sizes.bulkBatch}`, value: seedBulk, unit: 'jobs/s' },
        { scenario: 'enqueue', metric: 'bulk as a share of the seed unnest INSERT', value: round((bulk / seedBulk) * 100, 1), unit: '%' },
      );
    }
  }
  const largest = { size: Math.max(...sizes.drainSizes), concurrency: Math.max(...sizes.drainConcurrency) };
  for (const size of sizes.drainSizes) {
    for (const concurrency of sizes.drainConcurrency) {
      const runs = drainRuns(sluice, size, concurrency);
      if (!runs.length) continue;
      const label = `${size} jobs, concurrency ${concurrency}`;
      rows.push(
        { scenario: 'drain', metric: label, value: med(runs, (r) => r.jobsPerSec), unit: 'jobs/s', vsLimitAt: size },
        { scenario: 'drain', metric: `${label}: worker peak RSS`, value: round(med(runs, (r) => r.maxRssBytes) / MB, 1), unit: 'MB' },
        { scenario: 'drain', metric: `${label}: worker CPU per job`, value: round(med(runs, (r) => r.nodeCpuUsPerJob)), unit: 'µs' },
      );
      if (runs.every((r) => r.postgresCpuUsPerJob !== null)) {
        rows.push({ scenario: 'drain', metric: `${label}: Postgres backend CPU per job`, value: round(med(runs, (r) => r.postgresCpuUsPerJob!)), unit: 'µs' });
      }
      if (size === largest.size && concurrency === largest.concurrency) {
        rows.push(
          { scenario: 'drain', metric: `${label}: table+indexes after`, value: round(med(runs, (r) => r.table.totalBytes) / MB, 1), unit: 'MB' },
          { scenario: 'drain', metric: `${label}: dead tuples after`, value: med(runs, (r) => r.table.deadTuples), unit: 'rows' },
          { scenario: 'drain', metric: `${label}: HOT updates`, value: round(med(runs, (r) => r.table.hotUpdates / Math.max(1, r.table.updates)) * 100, 1), unit: '% of updates' },
        );
      }
    }
  }
  if (sluice.latency.length) {
    const label = `${sizes.latencyWorkers} idle workers, 1 job / ${sizes.latencyIntervalMs} ms`;
    for (const p of ['p50', 'p95', 'p99', 'max'] as const) {
      rows.push({ scenario: 'latency', metric: `commit → handler start ${p}, ${label}`, value: round(med(sluice.latency, (r) => r.latencyMs[p]), 2), unit: 'ms' });
    }
    if (sluice.latency.every((r) => r.workerStats)) {
      rows.push(
        { scenario: 'latency', metric: 'claim statements per job', value: round(med(sluice.latency, (r) => r.workerStats!.claims! / r.jobs), 2), unit: 'claims' },
        { scenario: 'latency', metric: 'empty claims per job', value: round(med(sluice.latency, (r) => r.workerStats!.emptyClaims! / r.jobs), 2), unit: 'claims' },
      );
    }
  }
  if (sluice.steady.length) {
    rows.push(
      { scenario: 'steady state', metric: `processed, ${sizes.steadyLoops} enqueue loops, ${sizes.steadyWorkers}×${sizes.steadyConcurrency} workers`, value: med(sluice.steady, (r) => r.processedPerSec), unit: 'jobs/s', vsLimitAt: Math.max(...sizes.drainSizes) },
      { scenario: 'steady state', metric: 'enqueued', value: med(sluice.steady, (r) => r.enqueuedPerSec), unit: 'jobs/s' },
      { scenario: 'steady state', metric: 'backlog at end', value: med(sluice.steady, (r) => r.backlogAtEnd), unit: 'jobs' },
    );
    if (sluice.steady.every((r) => r.workerStats)) {
      rows.push({ scenario: 'steady state', metric: 'claim statements per processed job', value: round(med(sluice.steady, (r) => r.workerStats!.claims! / Math.max(1, r.processed)), 2), unit: 'claims' });
    }
  }
  return rows;
}

const fmt = (n: number, digits = 0) => (Number.isFinite(n) ? round(n, digits).toLocaleString('en-US') : '∞');

/**
 * The comparison: one row per measure, one column per system, medians over the
 * repetitions. `–`: not measured for that system (the seed pattern has no worker).
 * `*`: the drain did not finish in time; the figure is the rate of the part drained.
 * `skip`: not run, because a drain at that concurrency drained less than half its
 * jobs in time.
 */
export function comparisonTable(all: SystemRuns[], sizes: BenchSizes): string {
  const lines: [string, (runs: SystemRuns) => string][] = [];
  const drainCell = (runs: SystemRuns, size: number, concurrency: number, value: (r: DrainRun) => number | null, digits = 0) => {
    if (runs.system.enqueueOnly) return '–';
    const done = drainRuns(runs, size, concurrency);
    if (!done.length) return 'skip';
    const values = done.map(value);
    if (values.some((v) => v === null)) return '?';
    return `${fmt(median(values as number[]), digits)}${done.some((r) => r.timedOut) ? '*' : ''}`;
  };
  const pair = (runs: SystemRuns, size: number, value: (r: DrainRun) => number | null, digits = 0) =>
    sizes.drainConcurrency.map((c) => drainCell(runs, size, c, value, digits)).join(' / ');
  const cs = sizes.drainConcurrency.map((c) => `c${c}`).join(' / ');
  for (const size of sizes.drainSizes) {
    for (const c of sizes.drainConcurrency) {
      lines.push([`drain ${size.toLocaleString('en-US')} jobs, concurrency ${c} (jobs/s)`, (r) => drainCell(r, size, c, (d) => d.jobsPerSec)]);
    }
  }
  for (const size of sizes.drainSizes) {
    const n = size.toLocaleString('en-US');
    lines.push(
      [`Postgres backend CPU per job, drain ${n}, ${cs} (µs)`, (r) => pair(r, size, (d) => d.postgresCpuUsPerJob)],
      [`worker CPU per job, drain ${n}, ${cs} (µs)`, (r) => pair(r, size, (d) => d.nodeCpuUsPerJob)],
      [`worker peak RSS, drain ${n}, ${cs} (MB)`, (r) => pair(r, size, (d) => d.maxRssBytes / MB)],
    );
  }
  const size = Math.max(...sizes.drainSizes);
  const conc = Math.max(...sizes.drainConcurrency);
  const after = `after the drain of ${size.toLocaleString('en-US')} at c${conc}`;
  lines.push(
    [`jobs table + indexes ${after} (MB)`, (r) => drainCell(r, size, conc, (d) => d.table.totalBytes / MB, 1)],
    [`dead tuples ${after}`, (r) => drainCell(r, size, conc, (d) => d.table.deadTuples)],
    [`enqueue → handler start p50 / p99, idle workers (ms)`, (r) => {
      if (!r.latency.length) return '–';
      return `${fmt(med(r.latency, (l) => l.latencyMs.p50), 2)} / ${fmt(med(r.latency, (l) => l.latencyMs.p99), 2)}`;
    }],
    [`single enqueue, ${sizes.enqueueCallers} callers (jobs/s)`, (r) => (r.enqueue.length ? fmt(med(r.enqueue, (e) => e.singleJobsPerSec)) : '–')],
    [`bulk enqueue, batches of ${sizes.bulkBatch.toLocaleString('en-US')} (jobs/s)`, (r) => (r.enqueue.length ? fmt(med(r.enqueue, (e) => e.bulkJobsPerSec)) : '–')],
    [`steady state, ${sizes.steadyLoops} enqueue loops: processed / enqueued (jobs/s)`, (r) => {
      if (!r.steady.length) return '–';
      return `${fmt(med(r.steady, (s) => s.processedPerSec))} / ${fmt(med(r.steady, (s) => s.enqueuedPerSec))}`;
    }],
    [`steady state: backlog at end (jobs)`, (r) => (r.steady.length ? fmt(med(r.steady, (s) => s.backlogAtEnd)) : '–')],
  );
  const header = ['', ...all.map((r) => r.system.label)];
  const cells = lines.map(([label, cell]) => [label, ...all.map(cell)]);
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i]!.length)));
  const line = (c: string[]) => `| ${c.map((v, i) => (i === 0 ? v.padEnd(widths[i]!) : v.padStart(widths[i]!))).join(' | ')} |`;
  return [line(header), `|${widths.map((w, i) => (i === 0 ? '-'.repeat(w + 2) : `${'-'.repeat(w + 1)}:`)).join('|')}|`, ...cells.map(line)].join('\n');
}
