#!/usr/bin/env node
// `sluice worker` stopped before its own handlers are in place (while Node loads the
// CLI) exits 0, as it does a moment later before it has started: nothing is claimed
// yet. Node's default ended it with 143 and no word (outside review 104). Never
// removed: a signal caught while it was the only listener is delivered a moment
// later, and found no listener at all once it had been removed (review 105: the
// worker then started and ran on). Once the worker command has its own handlers
// (they set the flag), this one leaves the signal to them.
const TAKEN = Symbol.for('sluice.cli.signalsTaken');
const args = process.argv.slice(2);
// `sluice stats --watch` too, until it refreshes: stopped while it waited for a Postgres
// it could not reach yet, it exited 130 or 143 (outside review 279). It prints no line.
const watching = args.includes('stats') && args.includes('--watch');
const early = (signal) => {
  if (globalThis[TAKEN]) return;
  if (watching) process.exit(0);
  const json = process.argv.includes('--json');
  process.stdout.write(
    json
      ? `${JSON.stringify({ time: new Date(), event: 'stopped', signal, before: 'load' })}\n`
      : `stopped signal=${signal} before=load\n`,
  );
  process.exit(0);
};
// `sluice relay` too, until its own handlers are in place (outside review 206: 143, no word).
if (watching || args.some((arg) => arg === 'worker' || arg === 'relay')) {
  process.on('SIGINT', early);
  process.on('SIGTERM', early);
}
let main;
try {
  ({ main } = await import('../dist/cli/main.js'));
} catch (err) {
  // Only in a clone of the repository: the published package ships dist/.
  if (err?.code !== 'ERR_MODULE_NOT_FOUND' || !String(err.message).includes('main.js')) throw err;
  process.stderr.write('sluice: not built yet (no dist/): run `npm run build` first\n');
  process.exit(1);
}

// A reader that went away (`sluice stats --watch | head -1`) ends the command
// quietly, as it does any Unix tool, instead of an unhandled EPIPE. A command that
// serves until stopped (worker, relay) stops as on SIGTERM instead (src/cli/output-closed.ts).
const OUTPUT_CLOSED = Symbol.for('sluice.cli.outputClosed');
// stderr closed too leaves nowhere to say anything: its errors are dropped. Unheard,
// each was an uncaught exception whose report failed in turn, and a worker with
// both closed spun at 100% CPU for ever (outside review 199).
process.stderr.on('error', () => {});
process.stdout.on('error', (err) => {
  if (typeof globalThis[OUTPUT_CLOSED] === 'function') return globalThis[OUTPUT_CLOSED](err);
  if (err.code !== 'EPIPE') process.stderr.write(`sluice: cannot write the output: ${err.message}\n`);
  process.exit(err.code === 'EPIPE' ? 0 : 1);
});

// Exit explicitly: a worker's task module may leave timers or connections open,
// and a command that finished must not hang on them. But only once stdout and
// stderr have taken what was written: to a pipe they are written asynchronously,
// and an exit at once cut `sluice jobs list --json | jq` off at 64 KiB, with
// code 0 (outside review 195).
const code = await main(process.argv);
const flushed = (stream) => new Promise((resolve) => stream.write('', () => resolve()));
await Promise.all([flushed(process.stdout), flushed(process.stderr)]);
process.exit(code);
