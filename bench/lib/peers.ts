import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const PEERS = fileURLToPath(new URL('../peers/', import.meta.url));
const NODE = `${PEERS}node_modules/node/bin/node`;

/**
 * The Node 22 that runs the peers (graphile-worker and pg-boss need it; Sluice's own
 * install stays on Node 20). bench/peers/ is a package of its own, installed here on
 * first use from its lock file (`npm --prefix bench/peers ci`), never by `npm install`
 * or `npm test` at the root.
 */
export function peersNode(log: (line: string) => void): string {
  const lock = `${PEERS}package-lock.json`;
  const installed = `${PEERS}node_modules/.package-lock.json`;
  // Reinstall when the lock file changed since the last install, not only when missing.
  if (!existsSync(NODE) || !existsSync(installed) || !sameDependencies(lock, installed)) {
    log('installing the peers (npm --prefix bench/peers ci): graphile-worker, pg-boss and Node 22');
    execFileSync('npm', ['--prefix', PEERS, 'ci', '--no-audit', '--no-fund', '--loglevel=error'], { stdio: 'inherit' });
  }
  const version = execFileSync(NODE, ['--version'], { encoding: 'utf8' }).trim();
  if (!/^v(2[2-9]|[3-9]\d)\./.test(version)) throw new Error(`bench/peers: expected Node >= 22 at ${NODE}, found ${version}`);
  return NODE;
}

/** Whether the installed tree (npm's hidden lock file) has the versions the lock file asks for. */
function sameDependencies(lockFile: string, installedFile: string): boolean {
  const versions = (file: string) => {
    const packages = (JSON.parse(readFileSync(file, 'utf8')) as { packages: Record<string, { version?: string }> }).packages;
    return Object.entries(packages).filter(([path]) => path.startsWith('node_modules/')).map(([p, v]) => `${p}@${v.version}`).sort().join('\n');
  };
  return versions(lockFile) === versions(installedFile);
}
