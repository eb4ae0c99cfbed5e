import { mkdir } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Queue } from '../../src/index.js';
import { startDashboard, type RunningDashboard } from '../../src/dashboard/server.js';
import type { Page } from 'playwright-core';
import {
  listGroupSettings,
  listQueueLimits,
  setGroupSettings,
  setQueueGroups,
  setQueueRateLimit,
} from '../../src/groups/settings.js';
import { createTestSchema, type TestDatabase } from '../helpers/database.js';
import { launchBrowser, type Browser } from './browser.js';

const SCREENSHOTS = fileURLToPath(new URL('../../docs/screenshots/', import.meta.url));
const TOKEN = 'e2e-groups-token-0123456789';

let db: TestDatabase;
let dashboard: RunningDashboard;
let browser: Browser;
let queue: Queue;

async function limitsOf(name: string) {
  return (await listQueueLimits(db.pool, db.schema)).find((q) => q.name === name);
}

async function settingOf(name: string, group: string | null) {
  return (await listGroupSettings(db.pool, db.schema, name)).find((s) => s.group === group);
}

/** Saves a form and waits until the page shows `text` in `where` (the data reloaded after the save). */
async function save(page: Page, form: string, where: string, text: string): Promise<void> {
  await page.click(`form[data-form="${form}"] button[type="submit"]`);
  // A locator, not waitForFunction: the dashboard's CSP forbids evaluating strings.
  await page.locator(where, { hasText: text }).waitFor();
}

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

  it("changes a queue's rate limit and group defaults and a group's settings through the forms, as stored", async () => {
    const page = await browser.context.newPage();
    await page.goto(`${dashboard.url}?token=${TOKEN}#/groups?queue=sync`);
    await page.waitForSelector('section[data-groups-of="sync"] tr[data-group="acme"]');
    // The selected queue's stored settings fill its form.
    expect(await page.inputValue('#ql-queue')).toBe('sync');
    expect(await page.inputValue('#ql-group-concurrency')).toBe('2');
    expect(await page.inputValue('#ql-rate-limit')).toBe('');

    // A queue rate limit (the burst left to the server's default) and a new group limit.
    await page.fill('#ql-rate-limit', '40');
    await page.fill('#ql-rate-per', '2');
    await page.fill('#ql-group-concurrency', '3');
    await save(page, 'queue-limits', 'tr[data-queue="sync"]', '40 per 2 s, burst 4');
    expect(await page.textContent('tr[data-queue="sync"] td[data-label="Group limit"]')).toBe('3');
    expect(await limitsOf('sync')).toMatchObject({
      grouped: true,
      groupConcurrency: 3,
      rateLimit: { limit: 40, intervalMs: 2000, burst: 4 },
      groupRateLimit: null,
    });
    // The form shows what the server stored, burst included.
    expect(await page.inputValue('#ql-rate-burst')).toBe('4');

    // Another queue through its Edit button: its rate limit removed by emptying the fields. It stays claimed in order.
    await page.click('button[data-focus-key="edit-limits:partner-api"]');
    expect(await page.inputValue('#ql-queue')).toBe('partner-api');
    expect(await page.inputValue('#ql-rate-limit')).toBe('100');
    for (const field of ['#ql-rate-limit', '#ql-rate-per', '#ql-rate-burst']) await page.fill(field, '');
    await save(page, 'queue-limits', 'tr[data-queue="partner-api"] td[data-label="Queue rate"]', '–');
    expect(await limitsOf('partner-api')).toMatchObject({ grouped: false, rateLimit: null, groupConcurrency: null });
    expect(await page.textContent('tr[data-queue="partner-api"] td[data-label="Claimed"]')).toBe('in order');

    // A group with settings, through its Edit button: a new weight, its limit back to the queue default, a rate of its own.
    await page.click('button[data-focus-key="edit-group:settings:globex"]');
    expect(await page.inputValue('#gs-group')).toBe('globex');
    expect(await page.inputValue('#gs-weight')).toBe('3');
    expect(await page.inputValue('#gs-concurrency')).toBe('5');
    await page.fill('#gs-weight', '2');
    await page.fill('#gs-concurrency', '');
    await page.fill('#gs-rate-limit', '7');
    await page.fill('#gs-rate-burst', '2');
    await save(page, 'group-settings', 'tr[data-setting-group="globex"]', '7 per 1 s, burst 2');
    expect(await page.textContent('tr[data-setting-group="globex"]')).toMatch(/globex\s*2\s*queue default\s*7 per 1 s, burst 2/);
    expect(await settingOf('sync', 'globex')).toMatchObject({
      weight: 2,
      concurrencyLimit: null,
      rateLimit: { limit: 7, intervalMs: 1000, burst: 2 },
    });

    // A group without settings, typed in; then the jobs without a group.
    await page.fill('#gs-group', 'acme');
    await page.press('#gs-group', 'Tab');
    expect(await page.inputValue('#gs-weight')).toBe('1');
    await page.fill('#gs-concurrency', '4');
    await save(page, 'group-settings', 'tr[data-setting-group="acme"]', 'acme');
    expect(await settingOf('sync', 'acme')).toMatchObject({ weight: 1, concurrencyLimit: 4, rateLimit: null });
    // acme now runs 2 of 4: open again.
    await page.waitForSelector('tr[data-group="acme"] td[data-state="open"]');
    await page.check('#gs-no-group');
    expect(await page.isDisabled('#gs-group')).toBe(true);
    await page.fill('#gs-weight', '5');
    await save(page, 'group-settings', 'tr[data-setting-group=""]', '(no group)');
    expect(await settingOf('sync', null)).toMatchObject({ weight: 5, concurrencyLimit: null });
    await page.close();
  });

  it("shows the server's message for a bad setting and changes nothing", async () => {
    const before = await limitsOf('sync');
    const page = await browser.context.newPage();
    await page.goto(`${dashboard.url}?token=${TOKEN}#/groups?queue=sync`);
    await page.waitForSelector('section[data-groups-of="sync"] tr[data-group="acme"]');
    await expect.poll(() => page.inputValue('#ql-queue')).toBe('sync');
    // The browser lets a negative number through: the server says what is wrong.
    await page.fill('#ql-rate-limit', '-5');
    await page.click('form[data-form="queue-limits"] button[type="submit"]');
    const alert = await page.waitForSelector('form[data-form="queue-limits"] .error[role="alert"]:not(:empty)');
    expect(await alert.textContent()).toBe('rate limit: limit must be an integer from 1 to 1000000, got -5');
    await page.fill('#gs-group', 'globex');
    await page.press('#gs-group', 'Tab');
    await page.fill('#gs-weight', '0');
    await page.click('form[data-form="group-settings"] button[type="submit"]');
    const groupAlert = await page.waitForSelector('form[data-form="group-settings"] .error[role="alert"]:not(:empty)');
    expect(await groupAlert.textContent()).toBe('weight must be an integer from 1 to 1000, got 0');
    expect(await limitsOf('sync')).toEqual(before);
    expect(await settingOf('sync', 'globex')).toMatchObject({ weight: 2 });
    await page.close();
  });
});
