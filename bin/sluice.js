#!/usr/bin/env node
import { main } from '../dist/cli/main.js';

// Exit explicitly: a worker's task module may leave timers or connections open,
// and a command that finished must not hang on them. (stdout and stderr are
// synchronous on Linux and macOS for files, pipes and terminals, so nothing
// written is lost.)
process.exit(await main(process.argv));
