import { randomBytes } from 'node:crypto';
import { cp, mkdir, rm, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

export interface SluiceBuild {
  /** file: URL of the copy's dist/index.js, for bench/systems/sluice.mjs (BENCH_SLUICE_DIST). */
  entry: string;
  remove(): Promise<void>;
}

/**
 * A private copy of the built package (dist/, the sql/ it migrates from, package.json) for one
 * run, so a rebuild of dist/ during a half-hour run (tests build it) neither breaks
 * the run nor changes the Sluice it measures halfway. It lives under bench/ so the
 * copy still resolves the root's node_modules; its own .gitignore hides it from git.
 */
export async function copyBuild(): Promise<SluiceBuild> {
  if (!existsSync(`${ROOT}dist/index.js`)) throw new Error('dist/index.js is missing: run `npm run build` first (npm run bench does)');
  const dir = `${ROOT}bench/.sluice-build-${randomBytes(3).toString('hex')}/`;
  await mkdir(dir, { recursive: true });
  await writeFile(`${dir}.gitignore`, '*\n');
  await cp(`${ROOT}dist`, `${dir}dist`, { recursive: true });
  await cp(`${ROOT}sql`, `${dir}sql`, { recursive: true });
  // The worker reads its version from the package's package.json (workers registry).
  await cp(`${ROOT}package.json`, `${dir}package.json`);
  return {
    entry: pathToFileURL(`${dir}dist/index.js`).href,
    remove: () => rm(dir, { recursive: true, force: true }),
  };
}
