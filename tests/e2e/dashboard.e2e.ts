import { mkdir } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Queue, Worker, PermanentFailure } from '../../src/index.js';
import { startDashboard, type RunningDashboard } from '../../src/dashboard/server.js';
import { createTestSchema, statusCounts, waitFor, type TestDatabase } from '../helpers/database.js';
import { startGate } from '../helpers/tcp-gate.js';
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
/** Jobs of the task 'long_report' report 40 % and run until this resolves. */
let finishReports!: () => void;
const reportsReleased = new Promise<void>((resolve) => (finishReports = resolve));

async function shot(page: Page, name: string): Promise<void> {
  // A toast from the action just taken would hide part of the page.
  await page.evaluate(
    "const t = document.getElementById('toast'); if (t) { t.style.transition = 'none'; t.classList.remove('visible'); }",
  );
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
    schedules: [{ name: 'nightly-digest', cron: '0 3 * * *', task: 'send_email', queue: 'emails', payload: { digest: true } }],
    tasks: {
      send_email: async () => {},
      long_report: async (_payload, { progress, signal }) => {
        progress({ done: 2, total: 5 });
        await Promise.race([reportsReleased, new Promise((resolve) => signal.addEventListener('abort', resolve))]);
      },
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
  finishReports?.();
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

  it('says an address names no page, instead of showing the overview (outside review 125)', async () => {
    const page = await browser.context.newPage();
    await page.goto(`${dashboard.url}#/jobs/-1`);
    await page.waitForSelector('h1:text-is("Not found")');
    expect(await page.textContent('main [role="alert"]')).toContain('No page at #/jobs/-1');
    expect(await page.title()).toBe('Not found · Sluice');
    await page.click('main a[href="#/"]');
    await page.waitForSelector('tr[data-queue="emails"]');
    await page.close();
  });

  it('wraps a 128-character queue name, as a table and as cards (outside review 125)', async () => {
    const long = `q${'x'.repeat(127)}`;
    const id = await queue.enqueue('resize_image', {}, { queue: long });
    const page = await browser.context.newPage();
    try {
      for (const width of [1000, 390]) {
        await page.setViewportSize({ width, height: 800 });
        await page.goto(dashboard.url);
        await page.waitForSelector(`tr[data-queue="${long}"]`);
        // The name wraps: its cell stays narrow (it was 1,300 px wide, pushing the counts out of
        // view), and the page is no wider than the screen.
        const cell = await page.$eval(`tr[data-queue="${long}"] th`, (th) => th.getBoundingClientRect().width);
        expect(cell, `${width}px wide`).toBeLessThan(width * 0.9);
        if (width === 1000) expect(cell).toBeLessThan(400);
        const overflow = await page.$eval('html', (html) => html.scrollWidth - html.clientWidth);
        expect(overflow, `${width}px wide`).toBeLessThanOrEqual(0);
      }
    } finally {
      await page.close();
      await db.pool.query(`DELETE FROM ${db.s}.jobs WHERE id = $1`, [id]);
    }
  });

  it('keeps a name with a right-to-left override from turning the text after it around (outside review 242)', async () => {
    const id = await queue.enqueue('rlo\u202etask', {}, { queue: 'bidi' });
    const page = await browser.context.newPage();
    try {
      await page.goto(`${dashboard.url}#/jobs?queue=bidi`);
      const row = await page.waitForSelector(`tr[data-job-id="${id}"]`);
      // The override shown as its code, as the CLI shows it: it reorders nothing (an
      // isolation, FSI … PDI, was undone by a name holding its own PDI: review 243).
      expect(await row.textContent()).toContain('rlo\\u202etask');
      expect(await row.textContent()).not.toContain('\u202e');
      // Names without such controls are shown exactly as they are.
      expect(await row.textContent()).toContain('bidi');
    } finally {
      await page.close();
      await db.pool.query(`DELETE FROM ${db.s}.jobs WHERE id = $1`, [id]);
    }
  });

  it('escapes bidi controls in the confirmation dialog and the toast too (outside review 252)', async () => {
    const name = 'ab\u202eplain';
    const id = await queue.enqueue('t', {}, { queue: name, delayMs: 3_600_000 });
    const page = await browser.context.newPage();
    try {
      await page.goto(`${dashboard.url}#/`);
      await page.click(`button[data-focus-key="pause:${name}"]`);
      // Set straight into the dialog, the name read the title backwards: "Pause ab?nialp".
      expect(await page.textContent('#confirm-title')).toBe('Pause ab\\u202eplain?');
      await page.click('#confirm-ok');
      await expect.poll(() => page.textContent('#toast')).toBe('ab\\u202eplain paused');
    } finally {
      await page.close();
      await queue.resumeQueue(name);
      await db.pool.query(`DELETE FROM ${db.s}.jobs WHERE id = $1`, [id]);
    }
  });

  it('cancels the pending jobs of one queue from the overview, after confirming', async () => {
    const mine = await queue.enqueueMany(
      Array.from({ length: 3 }, (_, i) => ({ task: 'resize_image', queue: 'backlog', payload: { i }, delayMs: 3_600_000 })),
    );
    const other = await queue.enqueue('resize_image', {}, { queue: 'backlog-other', delayMs: 3_600_000 });
    const page = await browser.context.newPage();
    try {
      await page.goto(`${dashboard.url}#/`);
      await page.click('button[data-focus-key="cancel-pending:backlog"]');
      expect(await page.textContent('#confirm-text')).toContain('still pending when you confirm (3 a moment ago)');
      await page.click('#confirm-ok');
      await expect.poll(() => page.textContent('#toast')).toBe('3 pending jobs of backlog cancelled');
      const { rows } = await db.pool.query(`SELECT id::text, status FROM ${db.s}.jobs WHERE queue LIKE 'backlog%' ORDER BY id`);
      expect(rows).toEqual([...mine.map((id) => ({ id, status: 'cancelled' })), { id: other, status: 'pending' }]);
      // Nothing pending is left in it, so the button is gone.
      await page.waitForSelector('button[data-focus-key="cancel-pending:backlog"]', { state: 'detached' });
    } finally {
      await page.close();
      await db.pool.query(`DELETE FROM ${db.s}.jobs WHERE queue LIKE 'backlog%'`);
    }
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

  it('lists the live workers with what each runs, since when and how far along', async () => {
    const id = await queue.enqueue('long_report', { month: '2026-11' }, { queue: 'reports' });
    await waitFor(
      async () => (await db.pool.query(`SELECT progress FROM ${db.s}.jobs WHERE id = $1`, [id])).rows[0]?.progress,
      'the report to report progress',
    );
    const page = await browser.context.newPage();
    await page.goto(`${dashboard.url}#/workers`);
    const row = `tr[data-worker-id="${worker.config.workerId}"]`;
    await page.waitForSelector(`${row}[data-alive="true"]`);
    expect(await page.textContent(row)).toContain('emails');
    const running = await page.waitForSelector(`tr[data-running-of="${worker.config.workerId}"] li[data-job-id="${id}"]`);
    expect(await running.textContent()).toMatch(/long_report on reports running/);
    expect(await running.$eval('progress', (p) => (p as unknown as { value: number }).value)).toBe(40);
    await shot(page, 'workers');

    // The job's own page shows the bar too, and the attempt running on this worker.
    await page.goto(`${dashboard.url}#/jobs/${id}`);
    await page.waitForSelector('#job-progress');
    expect(await page.$eval('.card progress', (p) => (p as unknown as { value: number }).value)).toBe(40);
    expect(await page.textContent('tr[data-attempt="1"]')).toContain(worker.config.workerId);
    expect(await page.getAttribute('tr[data-attempt="1"]', 'data-outcome')).toBe('running');
    finishReports();
    await page.waitForSelector('h1 .status-completed');
    await page.waitForSelector('tr[data-attempt="1"][data-outcome="completed"]');
    await page.close();
  });

  it('shows the cron schedules and runs one now', async () => {
    const page = await browser.context.newPage();
    await page.goto(`${dashboard.url}#/cron`);
    const row = await page.waitForSelector('tr[data-schedule="nightly-digest"]');
    expect(await row.textContent()).toMatch(/0 3 \* \* \*/);
    expect(await page.textContent('tr[data-schedule="nightly-digest"] td[data-label="Next run"]')).toMatch(/^in /);
    await shot(page, 'cron');
    await page.click('button[data-focus-key="run-schedule:nightly-digest"]');
    await page.click('#confirm-ok');
    // The page goes to the new job, which the worker runs.
    await page.waitForSelector('h1 .status-completed', { timeout: 20_000 });
    const id = /#\/jobs\/(\d+)$/.exec(page.url())![1]!;
    const { rows } = await db.pool.query(`SELECT task, queue, payload FROM ${db.s}.jobs WHERE id = $1`, [id]);
    expect(rows[0]).toEqual({ task: 'send_email', queue: 'emails', payload: { digest: true } });
    await page.close();
  });

  it('runs a delayed job now, and finds jobs by id and by a payload field', async () => {
    const id = await queue.enqueue('send_email', { to: 'later@example.com' }, { queue: 'emails', delayMs: 3_600_000 });
    const page = await browser.context.newPage();
    await page.goto(dashboard.url);
    await page.waitForSelector('tr[data-queue="emails"]');
    // The job id box in the header goes straight to the job.
    await page.fill('#find-job-id', id);
    await page.press('#find-job-id', 'Enter');
    await page.waitForSelector(`button[data-focus-key="run-now:${id}"]`);
    await page.click(`button[data-focus-key="run-now:${id}"]`);
    await page.click('#confirm-ok');
    await page.waitForSelector('h1 .status-completed', { timeout: 20_000 });
    expect(await page.textContent('.history')).toContain('Made due now by dashboard');

    await page.goto(`${dashboard.url}#/jobs?field=to&value=${encodeURIComponent('user7@example.com')}`);
    await page.waitForSelector('tr[data-job-id]');
    const rows = await page.$$eval('tr[data-job-id]', (trs) => trs.map((tr) => tr.textContent));
    expect(rows).toHaveLength(1);
    expect(await page.inputValue('#f-field')).toBe('to');
    await shot(page, 'jobs-search');
    await page.close();
  });

  it('the job id box works again after a bad entry, without a reload', async () => {
    const id = await queue.enqueue('send_email', { to: 'typo@example.com' }, { queue: 'emails', delayMs: 3_600_000 });
    const page = await browser.context.newPage();
    await page.goto(`${dashboard.url}?token=${TOKEN}`);
    await page.waitForSelector('tr[data-queue="emails"]');
    await page.fill('#find-job-id', 'abc');
    await page.press('#find-job-id', 'Enter');
    expect(await page.$eval('#find-job-id', (el) => (el as unknown as { validationMessage: string }).validationMessage)).toBe(
      'A job id is a number',
    );
    // Editing the box clears the error, so the next Enter submits.
    await page.fill('#find-job-id', id);
    expect(await page.$eval('#find-job-id', (el) => (el as unknown as { validity: { valid: boolean } }).validity.valid)).toBe(
      true,
    );
    await page.press('#find-job-id', 'Enter');
    await page.waitForURL(new RegExp(`#/jobs/${id}$`));
    await page.waitForSelector(`button[data-focus-key="run-now:${id}"]`);
    await page.close();
  });

  it('lists the tasks no worker handles in the health panel', async () => {
    const page = await browser.context.newPage();
    await page.goto(dashboard.url);
    const line = await page.waitForSelector('li[data-check="unknown_tasks"]');
    expect(await line.textContent()).toMatch(/resize_image on default: \d+ due/);
    await page.close();
  });

  it('says the database is unreachable, and recovers by itself', async () => {
    const gate = await startGate(new URL(db.url));
    const behind = await startDashboard({ connectionString: gate.url, schema: db.schema, token: TOKEN, port: 0, refreshMs: 300 });
    const page = await browser.context.newPage();
    const uncaught: string[] = [];
    page.on('pageerror', (err) => uncaught.push(err.message));
    try {
      await page.goto(`${behind.url}?token=${TOKEN}`);
      await page.waitForSelector('tr[data-queue="emails"]');
      await expect.poll(() => page.textContent('#live-state')).toBe('● live');
      // An action confirmed just as the database goes: its failure is told, and the
      // overview's reload after it threw uncaught in the page (outside review 274).
      await page.click('button[data-focus-key="pause:emails"]');
      gate.down();
      await page.click('#confirm-ok');
      await expect.poll(() => page.getAttribute('#toast', 'class')).toContain('error');
      await expect.poll(() => page.textContent('#live-state'), { timeout: 15_000 }).toContain('database unreachable');
      await page.waitForSelector('#db-banner:not([hidden])');
      expect(await page.textContent('#db-banner')).toContain('No answer from the database since');
      await shot(page, 'database-down');
      gate.up();
      await expect.poll(() => page.textContent('#live-state'), { timeout: 15_000 }).toBe('● live');
      expect(await page.isHidden('#db-banner')).toBe(true);
      expect(uncaught).toEqual([]);
    } finally {
      await page.close();
      await behind.close();
      await gate.close();
    }
  });
});
