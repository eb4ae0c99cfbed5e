/**
 * npm run chaos [-- --jobs 50000 --workers 4 --concurrency 16 --spread-s 240 --visibility-ms 4000
 *                  --kills 8 --terminates 5 --restarts 3 --row-locks 6 --queue-locks 4 --listen-cuts 4 --cut-offs 4]
 *
 * Drains a stream of jobs with worker processes on a private embedded Postgres
 * while killing workers, their connections and Postgres itself, locking job and
 * queue rows from another session, and cutting workers' connections off with TCP
 * proxies; prints the numbers and exits 1 on any violation (a lost job, an
 * overlapping run, an unexplained re-run).
 */
import { parseArgs } from 'node:util';
import { formatReport, runChaos, type FaultKind } from './chaos/run-chaos.js';

const FAULT_OPTIONS: Record<FaultKind, string> = {
  kill: 'kills',
  terminate: 'terminates',
  restart: 'restarts',
  rowLock: 'row-locks',
  queueLock: 'queue-locks',
  listenCut: 'listen-cuts',
  cutOff: 'cut-offs',
};

const { values } = parseArgs({
  options: {
    jobs: { type: 'string', default: '50000' },
    workers: { type: 'string', default: '4' },
    concurrency: { type: 'string', default: '16' },
    kills: { type: 'string', default: '8' },
    terminates: { type: 'string', default: '5' },
    restarts: { type: 'string', default: '3' },
    'row-locks': { type: 'string', default: '6' },
    'queue-locks': { type: 'string', default: '4' },
    'listen-cuts': { type: 'string', default: '4' },
    'cut-offs': { type: 'string', default: '4' },
    'visibility-ms': { type: 'string', default: '4000' },
    'spread-s': { type: 'string', default: '240' },
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
  faults: Object.fromEntries(
    Object.entries(FAULT_OPTIONS).map(([kind, option]) => [kind, num(option as keyof typeof values)]),
  ) as Record<FaultKind, number>,
  visibilityTimeoutMs: num('visibility-ms'),
  spreadMs: num('spread-s') * 1_000,
  timeoutMs: num('timeout-s') * 1_000,
  log: (line) => console.log(line),
});
console.log(`\n${formatReport(report)}`);
process.exit(report.violations.length > 0 ? 1 : 0);
