#!/usr/bin/env node
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
// quietly, as it does any Unix tool, instead of an unhandled EPIPE.
process.stdout.on('error', (err) => {
  if (err.code !== 'EPIPE') process.stderr.write(`sluice: cannot write the output: ${err.message}\n`);
  process.exit(err.code === 'EPIPE' ? 0 : 1);
});

// Exit explicitly: a worker's task module may leave timers or connections open,
// and a command that finished must not hang on them. (stdout and stderr are
// synchronous on Linux and macOS for files, pipes and terminals, so nothing
// written is lost.)
process.exit(await main(process.argv));
