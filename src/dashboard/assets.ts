import { readdir, readFile } from 'node:fs/promises';
import { extname, join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The browser side: plain ES modules and CSS shipped in the package's web/ folder, no build step, no CDN. */
const WEB_DIR = fileURLToPath(new URL('../../web/', import.meta.url));

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
};

export interface Asset {
  type: string;
  body: Buffer;
}

/**
 * Every file the browser may ask for, read once into memory. Serving only
 * from this map (never from a path built out of the URL) rules out path
 * traversal, and the whole front end is a few dozen kilobytes.
 */
export async function loadAssets(): Promise<Map<string, Asset>> {
  const assets = new Map<string, Asset>();
  for (const file of await listFiles(WEB_DIR)) {
    const type = TYPES[extname(file)];
    if (!type) continue;
    const name = relative(WEB_DIR, file).split(sep).join('/');
    assets.set(name, { type, body: await readFile(file) });
  }
  return assets;
}

async function listFiles(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true });
  const files: string[] = [];
  for (const entry of entries) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) files.push(...(await listFiles(path)));
    else files.push(path);
  }
  return files;
}

/** The page with this instance's CSRF token filled in (the token is URL-safe base64: no escaping needed). */
export function renderIndex(index: Asset, csrfToken: string): string {
  return index.body.toString('utf8').replace('{{csrfToken}}', csrfToken);
}
