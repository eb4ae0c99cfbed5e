/** Where bin/sluice.js looks for what to do when stdout fails (its reader went away: EPIPE). */
const OUTPUT_CLOSED = Symbol.for('sluice.cli.outputClosed');

/**
 * For a command that serves until stopped (worker, relay): `stop` is called on
 * every error of stdout, instead of the exit at once that ends a command whose
 * reader went away. A worker whose log reader died exited 0 at once, its running
 * jobs left to the rescuer, which failed those on their last attempt, and a
 * supervisor restarting on failure left it down (outside review 196).
 */
export function onOutputClosed(stop: (err: Error) => void): void {
  (globalThis as Record<symbol, unknown>)[OUTPUT_CLOSED] = stop;
}
