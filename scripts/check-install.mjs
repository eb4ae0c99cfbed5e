// Does `npm install sluice` resolve in a fresh app against the registry as it is
// today? Optional peers are resolved too (npm checks an optional peer's own peers):
// when postgres.js 4 became npm's latest, drizzle-orm's optional `postgres >=3`
// picked it, clashed with Sluice's `postgres ^3.4.0`, and every install failed with
// ERESOLVE (outside review 80). Packs the package, then asks npm to resolve
// (`--dry-run`: nothing is downloaded or written) the README's install, and that
// install with every optional peer at its latest version that runs on Node 20
// (MikroORM 7 needs Node 22: its range is ^6.4). Needs the npm registry.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const root = new URL('..', import.meta.url).pathname;
const app = mkdtempSync(join(tmpdir(), 'sluice-install-'));
const npm = (args, cwd) => execFileSync('npm', args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
const OPTIONAL = [
  'postgres',
  'nats',
  'amqplib',
  'fastify',
  'prom-client',
  '@opentelemetry/api',
  'kysely',
  'knex',
  'drizzle-orm',
  'typeorm',
  '@prisma/client',
];

let failed = false;
try {
  const [{ filename }] = JSON.parse(npm(['pack', '--json', '--ignore-scripts', '--pack-destination', app], root));
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'fresh-app', version: '1.0.0', private: true }));
  for (const extra of [['pg'], ['pg', ...OPTIONAL]]) {
    const what = `npm install sluice ${extra.join(' ')}`;
    try {
      npm(['install', '--dry-run', '--no-audit', '--no-fund', `./${filename}`, ...extra], app);
      console.log(`ok: ${what}`);
    } catch (err) {
      failed = true;
      console.error(`FAILED: ${what}\n${err.stderr ?? err.message}`);
    }
  }
} finally {
  rmSync(app, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
