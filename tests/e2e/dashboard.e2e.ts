import { mkdir } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Queue, Worker, PermanentFailure } from '../../src/index.js';
import { startDashboard, type RunningDashboard } from '../../src/dashboard/server.js';
import { createTestSchema, statusCounts, waitFor, type TestDatabase } from '../helpers/database.js';
import { launchBrowser, type Browser } from './browser.js';

const SCREENSHOTS = fileURLToPath(new URL('../../docs/screenshots/', import.meta.url));
const TOKEN = 'e2e-token-0123456789';

let db: TestDatabase;
let dashboard: RunningDashboard;
let browser: Browser;
let queue: Queue;
let worker: Worker;
/** Jobs of the task 'flaky' fail for good on their first run and succeed when retried. */
const flakyRuns = new Map<string, number>();

async function shot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: `${SCREENSHOTS}${name}.png`, fullPage: true });
}

beforeAll(async () => {
  await mkdir(SCREENSHOTS, { recursive: true });
  db = await createTestSchema('e2e');
  queue = new Queue({ connectionString: db.url, schema: db.schema });
  worker = new Worker({
    connectionString: db.url,
    schema: db.schema,
    queues: ['default', 'emails', 'reports'],
    concurrency: 4,
    tasks: {
      send_email: async () => {},
      flaky: async (_payload, { job }) => {
        const runs = (flakyRuns.get(job.id) ?? 0) + 1;
        flakyRuns.set(job.id, runs);
        if (runs === 1) throw new PermanentFailure(`upstream said 502 on run ${runs}`);
      },
    },
  });
  await worker.start();
  // Some history for the overview: completed and failed jobs in three queues.
  await queue.enqueueMany([
    ...Array.from({ length: 40 }, (_, i) => ({ task: 'send_email', queue: 'emails', payload: { to: `user${i}@example.com` } })),
    ...Array.from({ length: 3 }, (_, i) => ({ task: 'flaky', queue: 'reports', payload: { report: i } })),
    { task: 'send_email', payload: { to: 'ops@example.com' } },
  ]);
  // A job no worker here handles stays pending, so the overview has a backlog to show.
  await queue.enqueue('resize_image', { image: 'cat.png' }, { queue: 'default' });
  await waitFor(async () => (await statusCounts(db)).completed === 41 && (await statusCounts(db)).failed === 3, 'jobs to settle');
  // Spread the finishing times over the last 40 minutes, unevenly, so the chart has a shape to show.
  await db.pool.query(
    `UPDATE ${db.s}.jobs SET finished_at = now() - ((id * id) % 41) * interval '1 minute' WHERE status IN ('completed', 'failed')`,
  );
  dashboard = await startDashboard({ connectionString: db.url, schema: db.schema, token: TOKEN, port: 0, refreshMs: 300 });
  browser = await launchBrowser();
});

afterAll(async () => {
  await browser?.close();
  await dashboard?.close();
  await worker?.stop();
  await queue?.close();
  await db?.drop();
});

describe('dashboard in Chromium', () => {
  it('refuses access without the token', async () => {
    const page = await browser.context.newPage();
    const response = await page.goto(dashboard.url);
    expect(response?.status()).toBe(401);
    await expect.poll(() => page.textContent('h1')).toContain('authentication required');
    const api = await page.evaluate(async () => (await fetch('api/overview')).status);
    expect(api).toBe(401);
    const wrong = await page.goto(`${dashboard.url}?token=not-the-token`);
    expect(wrong?.status()).toBe(401);
    await shot(page, 'refused');
    await page.close();
  });

  it('loads the overview with the token, and keeps it in a cookie', async () => {
    const page = await browser.context.newPage();
    await page.goto(`${dashboard.url}?token=${TOKEN}`);
    // The token went into a cookie and out of the address bar.
    expect(page.url()).toBe(dashboard.url);
    await page.waitForSelector('tr[data-queue="emails"]');
    await expect.poll(() => page.textContent('#live-state')).toContain('live');
    expect(await page.textContent('tr[data-queue="emails"] td[data-status="completed"]')).toContain('40');
    expect(await page.textContent('tr[data-queue="reports"] td[data-status="failed"]')).toContain('3');
    expect(await page.getAttribute('svg.chart', 'aria-label')).toMatch(/41 completed, 3 failed/);
    // The health panel runs the doctor's checks.
    await page.waitForSelector('.health-status');
    await shot(page, 'overview');

    await page.setViewportSize({ width: 390, height: 844 });
    await page.reload();
    await page.waitForSelector('tr[data-queue="emails"]');
    await page.waitForSelector('.health-status');
    await shot(page, 'overview-phone');
    await page.close();
  });

  it('shows a job live after an enqueue, without reloading the page', async () => {
    const page = await browser.context.newPage();
    await page.goto(`${dashboard.url}#/jobs`);
    await page.waitForSelector('tr[data-job-id]');
    await expect.poll(() => page.textContent('#live-state')).toContain('live');
    await page.evaluate(() => ((globalThis as unknown as { notReloaded: boolean }).notReloaded = true));

    const id = await queue.enqueue('resize_image', { image: 'dog.png' }, { queue: 'default', delayMs: 3_600_000 });
    const row = await page.waitForSelector(`tr[data-job-id="${id}"]`);
    expect(await row.textContent()).toContain('resize_image');
    expect(await page.evaluate(() => (globalThis as unknown as { notReloaded?: boolean }).notReloaded)).toBe(true);
    await shot(page, 'jobs');
    await page.close();
  });

  it('retries a failed job by clicking, after confirming', async () => {
    // A job that failed just now: the pruner archives finished jobs after a minute, and archived ones are read-only.
    const id = await queue.enqueue('flaky', { report: 'fresh' }, { queue: 'reports' });
    await waitFor(
      async () => (await db.pool.query(`SELECT status FROM ${db.s}.jobs WHERE id = $1`, [id])).rows[0]?.status === 'failed',
      'the job to fail',
    );
    const page = await browser.context.newPage();
    await page.goto(`${dashboard.url}#/jobs/${id}`);
    await page.waitForSelector('h1 .status-failed');
    expect(await page.textContent('main')).toContain('upstream said 502 on run 1');

    // By keyboard first: Enter opens the confirmation with focus on "Cancel",
    // Escape closes it, focus goes back to the button, and nothing happened.
    const retryButton = `button[data-focus-key="retry:${id}"]`;
    await page.focus(retryButton);
    await page.keyboard.press('Enter');
    await page.waitForSelector('dialog[open]');
    expect(await page.evaluate('document.activeElement?.id')).toBe('confirm-cancel');
    await shot(page, 'job-retry-confirm');
    await page.keyboard.press('Escape');
    await page.waitForSelector('dialog:not([open])', { state: 'attached' });
    expect(await page.evaluate('document.activeElement?.dataset.focusKey')).toBe(`retry:${id}`);
    expect((await db.pool.query(`SELECT status FROM ${db.s}.jobs WHERE id = $1`, [id])).rows[0].status).toBe('failed');

    // Then with the mouse, confirmed.
    await page.click(retryButton);
    await page.click('#confirm-ok');
    // The worker runs it again; the page follows the job to 'completed' by itself.
    await page.waitForSelector('h1 .status-completed', { timeout: 20_000 });
    expect(flakyRuns.get(id)).toBe(2);
    // The retry is in the job's history, with who did it.
    await page.waitForSelector('.history li[data-kind="action"]');
    expect(await page.textContent('.history li[data-kind="action"]')).toMatch(/Retried by dashboard token from 127\.0\.0\.1/);
    await shot(page, 'job');
    await page.close();
  });
});
