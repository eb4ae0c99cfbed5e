import { mkdir } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Queue } from '../../src/index.js';
import { startDashboard, type RunningDashboard } from '../../src/dashboard/server.js';
import { setGroupSettings, setQueueGroups, setQueueRateLimit } from '../../src/groups/settings.js';
import { createTestSchema, type TestDatabase } from '../helpers/database.js';
import { launchBrowser, type Browser } from './browser.js';

const SCREENSHOTS = fileURLToPath(new URL('../../docs/screenshots/', import.meta.url));
const TOKEN = 'e2e-groups-token-0123456789';

let db: TestDatabase;
let dashboard: RunningDashboard;
let browser: Browser;
let queue: Queue;

beforeAll(async () => {
  await mkdir(SCREENSHOTS, { recursive: true });
  db = await createTestSchema('e2egroups');
  queue = new Queue({ connectionString: db.url, schema: db.schema });
  // No worker: what is pending stays pending, and two jobs are marked running by hand.
  await queue.enqueueMany([
    ...Array.from({ length: 30 }, () => ({ task: 'sync', queue: 'sync', group: 'acme' })),
    ...Array.from({ length: 4 }, () => ({ task: 'sync', queue: 'sync', group: 'globex' })),
    ...Array.from({ length: 2 }, () => ({ task: 'sync', queue: 'sync' })),
    { task: 'sync', queue: 'sync', group: 'initech', delayMs: 3_600_000 },
  ]);
  await db.pool.query(
    `UPDATE ${db.s}.jobs SET status = 'processing', locked_by = 'e2e', locked_at = now(), started_at = now(), attempts = 1
     WHERE id IN (SELECT id FROM ${db.s}.jobs WHERE group_key = 'acme' ORDER BY id LIMIT 2)`,
  );
  await setQueueGroups(db.pool, db.schema, 'sync', { groupConcurrency: 2 });
  await setGroupSettings(db.pool, db.schema, 'sync', 'globex', { weight: 3, concurrencyLimit: 5 });
  await setQueueRateLimit(db.pool, db.schema, 'partner-api', { limit: 100, intervalMs: 1000, burst: 10 });
  dashboard = await startDashboard({ connectionString: db.url, schema: db.schema, token: TOKEN, port: 0, refreshMs: 300 });
  browser = await launchBrowser();
});

afterAll(async () => {
  await browser?.close();
  await dashboard?.close();
  await queue?.close();
  await db?.drop();
});

describe('dashboard groups page in Chromium', () => {
  it("lists the queues with settings, and one queue's groups with backlog, running, throttled and settings", async () => {
    const page = await browser.context.newPage();
    await page.goto(`${dashboard.url}?token=${TOKEN}`);
    await page.click('a[data-nav="groups"]');
    await page.waitForSelector('tr[data-queue="sync"]');
    expect(await page.getAttribute('a[data-nav="groups"]', 'aria-current')).toBe('page');
    expect(await page.textContent('tr[data-queue="sync"]')).toContain('round robin across groups');
    expect(await page.textContent('tr[data-queue="partner-api"]')).toContain('100 per 1 s, burst 10');
    // Only grouped queues link to their groups.
    expect(await page.$('tr[data-queue="partner-api"] a')).toBeNull();

    await page.click('tr[data-queue="sync"] a');
    await page.waitForSelector('section[data-groups-of="sync"] tr[data-group="acme"]');
    expect(await page.title()).toBe('Groups of sync · Sluice');
    const totals = await page.textContent('.group-totals');
    // acme (due and running), globex, the jobs without a group, initech (only a delayed job).
    expect(totals).toContain('4 groups with pending or running jobs: 3 with due jobs');
    // acme runs 2 of its limit of 2 with jobs due: held back.
    expect(totals).toContain('1 throttled');
    const acme = await page.textContent('tr[data-group="acme"]');
    expect(acme).toMatch(/acme\s*28\s*0\s*2\s*1\s*2\s*throttled/);
    expect(await page.getAttribute('tr[data-group="globex"] td[data-state]', 'data-state')).toBe('open');
    expect(await page.textContent('tr[data-group=""] th')).toBe('(no group)');
    expect(await page.textContent('tr[data-group="initech"]')).toMatch(/initech\s*0\s*1/);
    expect(await page.textContent('tr[data-setting-group="globex"]')).toMatch(/globex\s*3\s*5\s*queue default/);
    await page.screenshot({ path: `${SCREENSHOTS}groups.png`, fullPage: true });

    // Live: a job of a new group shows up on the next reload of the panel.
    await queue.enqueue('sync', {}, { queue: 'sync', group: 'umbrella' });
    await page.waitForSelector('tr[data-group="umbrella"]', { timeout: 15_000 });
    await page.close();
  });
});
