/**
 * npm run chaos [-- --jobs 50000 --workers 4 --concurrency 16 --kills 12 --terminates 8 --restarts 4]
 *
 * Drains the jobs with worker processes on a private embedded Postgres while
 * killing workers, their connections and Postgres itself; prints the numbers and
 * exits 1 on any violation (a lost job, an overlapping run, an unexplained re-run).
 */
import { parseArgs } from 'node:util';
import { formatReport, runChaos } from './chaos/run-chaos.js';

const { values } = parseArgs({
  options: {
    jobs: { type: 'string', default: '50000' },
    workers: { type: 'string', default: '4' },
    concurrency: { type: 'string', default: '16' },
    kills: { type: 'string', default: '12' },
    terminates: { type: 'string', default: '8' },
    restarts: { type: 'string', default: '4' },
    'visibility-ms': { type: 'string', default: '10000' },
    'timeout-s': { type: 'string', default: '900' },
  },
});
const num = (name: keyof typeof values) => {
  const n = Number(values[name]);
  if (!Number.isInteger(n) || n < 0) throw new Error(`--${name} must be a non-negative integer`);
  return n;
};

const report = await runChaos({
  jobs: num('jobs'),
  workers: num('workers'),
  concurrency: num('concurrency'),
  faults: { kill: num('kills'), terminate: num('terminates'), restart: num('restarts') },
  visibilityTimeoutMs: num('visibility-ms'),
  timeoutMs: num('timeout-s') * 1_000,
  log: (line) => console.log(line),
});
console.log(`\n${formatReport(report)}`);
process.exit(report.violations.length > 0 ? 1 : 0);
