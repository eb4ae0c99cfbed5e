/**
 * Every program in examples/ runs as a user would run it (`tsx`, importing 'sluice'
 * through the package's name, so the built dist/), against the test database in
 * a schema of its own, and must exit 0 ("ok": it checked that it did what it
 * says). The README quotes regions of them verbatim: this file checks that too.
 */
import { execFile } from 'node:child_process';
import { readdir, readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { createTestSchema } from './helpers/database.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const EXAMPLES = (await readdir(new URL('../examples/', import.meta.url))).filter((f) => f.endsWith('.ts')).sort();

function runExample(file: string, env: Record<string, string>): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', `examples/${file}`],
      { cwd: ROOT, env: { ...process.env, ...env }, timeout: 60_000 },
      (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, output: stdout + stderr }),
    );
  });
}

describe.concurrent('examples', () => {
  it('are there', () => {
    expect(EXAMPLES).toEqual(
      expect.arrayContaining([
        'quick-start.ts',
        'delayed-and-retries.ts',
        'cron.ts',
        'wait-for-result.ts',
        'http-server.ts',
        'graceful-shutdown.ts',
      ]),
    );
  });

  for (const file of EXAMPLES) {
    it(`${file} runs and exits 0`, async () => {
      const db = await createTestSchema(`ex_${file.replace(/\W.*$/, '')}`);
      try {
        const { code, output } = await runExample(file, { DATABASE_URL: db.url, SLUICE_SCHEMA: db.schema });
        expect(code, output).toBe(0);
        expect(output).toMatch(/^ok\b/m);
      } finally {
        await db.drop();
      }
    });
  }
});

/** `// #region name` … `// #endregion` blocks of a file, without the markers. */
function regions(text: string): Map<string, string> {
  const found = new Map<string, string>();
  for (const m of text.matchAll(/^[ \t]*\/\/ #region (\S+)\n([\s\S]*?)^[ \t]*\/\/ #endregion$/gm)) found.set(m[1]!, m[2]!);
  return found;
}

describe('README', () => {
  it('quotes the examples verbatim: every #region of examples/ is in README.md', async () => {
    const readme = await readFile(new URL('../README.md', import.meta.url), 'utf8');
    let quoted = 0;
    for (const file of EXAMPLES) {
      const text = await readFile(new URL(`../examples/${file}`, import.meta.url), 'utf8');
      for (const [name, body] of regions(text)) {
        expect(readme.includes(body), `README.md lacks examples/${file} #region ${name}, or it changed:\n${body}`).toBe(true);
        quoted += 1;
      }
    }
    expect(quoted).toBeGreaterThan(0);
  });
});
