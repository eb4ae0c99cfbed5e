// Removes files from dist/ whose source in src/ is gone (a renamed or deleted
// module), after `tsc` has written the rest in place. Deleting dist/ before the
// build would do the same, but leave no dist/ at all while tsc runs.
import { readdirSync, rmSync } from 'node:fs';

const sources = new Set(readdirSync('src', { recursive: true }).map((f) => String(f).replace(/\.ts$/, '')));
for (const file of readdirSync('dist', { recursive: true }).map(String)) {
  const stem = file.replace(/(\.d\.ts|\.js\.map|\.d\.ts\.map|\.js)$/, '');
  if (stem !== file && !sources.has(stem)) {
    rmSync(`dist/${file}`);
    console.log(`removed dist/${file} (no src/${stem}.ts)`);
  }
}
