// The overview: every queue with its counts, waiting time, throughput and
// failure rate, the throughput chart of the last hour, and the health panel.
import { get, post } from '../api.js';
import { throughputChart } from '../chart.js';
import { h, replace } from '../dom.js';
import { count, counted, duration, percent } from '../format.js';
import { confirmed, keepFocus } from '../ui.js';

// [status, field of the queue's stats, column label]. Waiting and running jobs
// are counted now; finished ones over the last hour (older ones are pruned away).
const COUNTS = [
  ['pending', 'pending', 'Pending'],
  ['processing', 'processing', 'Running'],
  ['completed', 'completedInWindow', 'Completed (1 h)'],
  ['failed', 'failedInWindow', 'Failed (1 h)'],
  ['cancelled', 'cancelledInWindow', 'Cancelled (1 h)'],
];

/** @param {HTMLElement} main @param {{ overview: any, refresh: () => void }} ctx */
export function overviewView(main, ctx) {
  const chartBox = h('div', { class: 'chart-box' });
  const queuesBox = h('div', { class: 'table-box' });
  const healthBox = h('div', null, h('p', null, 'Checking…'));
  replace(
    main,
    h('h1', null, 'Overview'),
    h('section', { 'aria-labelledby': 'health-title', class: 'card' }, h('h2', { id: 'health-title' }, 'Health'), healthBox),
    h('section', { 'aria-labelledby': 'throughput-title', class: 'card' }, h('h2', { id: 'throughput-title' }, 'Throughput, last hour'), chartBox),
    h('section', { 'aria-labelledby': 'queues-title', class: 'card' }, h('h2', { id: 'queues-title' }, 'Queues'), queuesBox),
  );

  /** @type {any} */
  let current;
  const drawChart = () => current && replace(chartBox, throughputChart(current.throughput, chartBox.clientWidth), legend());
  /** @param {any} overview */
  const show = (overview) => {
    if (!overview) return;
    current = overview;
    drawChart();
    keepFocus(queuesBox, () => replace(queuesBox, queueTable(overview, ctx)));
  };
  show(ctx.overview);
  const loadHealth = async () => {
    try {
      const report = await get('health');
      keepFocus(healthBox, () => replace(healthBox, healthPanel(report)));
    } catch (err) {
      replace(healthBox, h('p', { class: 'error' }, `Health checks failed: ${err instanceof Error ? err.message : String(err)}`));
    }
  };
  void loadHealth();
  // While this view is on screen; the server runs the checks at most every 15 s for everyone.
  const healthTimer = setInterval(() => (main.contains(healthBox) ? void loadHealth() : clearInterval(healthTimer)), HEALTH_MS);
  // Redrawn at its new width when the window (or phone orientation) changes.
  new ResizeObserver(drawChart).observe(chartBox);
  return { onOverview: show };
}

const HEALTH_MS = 30_000;

/**
 * A queue's action button, run after confirmation (see ui.js's confirmed).
 * @param {any} q @param {{ refresh: () => void }} ctx
 * @param {{ key: string, label: string, primary?: boolean } & Parameters<typeof confirmed>[0]} action
 */
function queueButton(q, ctx, { key, label, primary, ...confirm }) {
  return h('button', {
    type: 'button',
    class: primary ? 'small' : 'small secondary',
    'data-focus-key': `${key}:${q.queue}`,
    onclick: () => confirmed(confirm).then(ctx.refresh),
  }, label);
}

/** Pause or resume. @param {any} q @param {{ refresh: () => void }} ctx */
function pauseButton(q, ctx) {
  const action = q.paused ? 'resume' : 'pause';
  const label = q.paused ? 'Resume' : 'Pause';
  return queueButton(q, ctx, {
    key: action,
    label,
    title: `${label} ${q.queue}?`,
    text: q.paused
      ? 'Workers start claiming its jobs again.'
      : 'No worker claims its jobs until it is resumed; running jobs finish and new jobs still enqueue.',
    ok: label,
    run: () => post(`queues/${encodeURIComponent(q.queue)}/${action}`),
    done: `${q.queue} ${q.paused ? 'resumed' : 'paused'}`,
  });
}

/** @param {any} q @param {{ refresh: () => void }} ctx */
function retryFailedButton(q, ctx) {
  return queueButton(q, ctx, {
    key: 'retry-failed',
    label: 'Retry failed',
    primary: true,
    title: `Retry failed jobs of ${q.queue}?`,
    text: `${count(q.failed)} failed jobs go back to pending and run again.`,
    ok: 'Retry all',
    run: () => post('jobs/retry-failed', { queue: q.queue }),
    done: (r) => `${counted(r.retried, 'job')} of ${q.queue} queued again`,
  });
}

/** @param {any} q @param {{ refresh: () => void }} ctx */
function cancelPendingButton(q, ctx) {
  return queueButton(q, ctx, {
    key: 'cancel-pending',
    label: 'Cancel pending',
    title: `Cancel pending jobs of ${q.queue}?`,
    // What is pending when the cancel runs, not the count shown (outside review 274: 10
    // jobs enqueued while the dialog was open were cancelled too, the text said "not").
    text: `Every job of it still pending when you confirm (${count(q.pending)} a moment ago), due now or later, is cancelled and never runs; jobs enqueued after that are not. Running jobs go on.`,
    ok: 'Cancel pending',
    run: () => post('jobs/cancel', { queue: q.queue, statuses: ['pending'] }),
    done: (r) => `${counted(r.cancelled, 'pending job')} of ${q.queue} cancelled`,
  });
}

/**
 * The `sluice doctor` report: problems first, each with its numbers and advice;
 * the checks that passed folded away.
 * @param {{ status: string, checks: { id: string, title: string, status: string, summary: string, advice?: string }[] }} report
 */
function healthPanel(report) {
  const problems = report.checks.filter((c) => c.status !== 'ok');
  const fine = report.checks.filter((c) => c.status === 'ok');
  const line = (/** @type {any} */ c) => h('li', { 'data-check': c.id },
    h('span', { class: `level level-${c.status}` }, c.status),
    h('span', null, h('strong', null, c.title), ': ', c.summary, c.advice && c.status !== 'ok' ? h('small', { class: 'advice' }, c.advice) : null));
  return [
    h('p', { class: `health-status level-${report.status}` },
      report.status === 'ok' ? 'All checks pass.' : `${problems.length} of ${report.checks.length} checks need attention.`),
    problems.length ? h('ul', { class: 'health' }, problems.map(line)) : null,
    fine.length ? h('details', null, h('summary', null, `${fine.length} checks pass`), h('ul', { class: 'health' }, fine.map(line))) : null,
  ];
}

function legend() {
  return h('p', { class: 'legend' }, h('span', { class: 'key key-completed' }), 'completed ', h('span', { class: 'key key-failed' }), 'failed');
}

/** @param {any} overview @param {{ refresh: () => void }} ctx */
function queueTable(overview, ctx) {
  if (overview.queues.length === 0) return h('p', null, 'No jobs yet. Enqueue one and it shows up here.');
  return h(
    'table',
    { class: 'stack' },
    h('caption', { class: 'sr-only' }, 'Jobs per queue and status'),
    h('thead', null, h('tr', null,
      h('th', { scope: 'col' }, 'Queue'),
      COUNTS.map(([, , label]) => h('th', { scope: 'col', class: 'num' }, label)),
      h('th', { scope: 'col', class: 'num' }, 'Oldest waiting'),
      h('th', { scope: 'col', class: 'num' }, 'Failure rate (1 h)'),
      h('th', { scope: 'col' }, 'State'),
      h('th', { scope: 'col' }, 'Actions'),
    )),
    h('tbody', null, overview.queues.map((/** @type {any} */ q) => h('tr', { 'data-queue': q.queue },
      h('th', { scope: 'row', 'data-label': 'Queue' }, h('a', { href: `#/jobs?queue=${encodeURIComponent(q.queue)}` }, q.queue)),
      COUNTS.map(([status, field, label]) => h('td', { class: 'num', 'data-label': label, 'data-status': status },
        q[field] > 0
          ? h('a', { href: `#/jobs?queue=${encodeURIComponent(q.queue)}&status=${status}`, 'aria-label': `${count(q[field])} ${label.toLowerCase()} in ${q.queue}` }, count(q[field]))
          : '0',
        status === 'pending' && q.scheduled > 0 ? h('small', null, ` (${count(q.scheduled)} later)`) : null)),
      h('td', { class: 'num', 'data-label': 'Oldest waiting' }, duration(q.oldestPendingMs)),
      h('td', { class: 'num', 'data-label': 'Failure rate (1 h)' }, percent(q.failureRate)),
      h('td', { 'data-label': 'State', 'data-state': q.paused ? 'paused' : 'running' },
        h('span', { class: `badge ${q.paused ? 'state-paused' : 'state-running'}` }, q.paused ? 'paused' : 'running'),
        q.concurrencyLimit !== null ? h('small', null, ` (max ${count(q.concurrencyLimit)} at once)`) : null),
      h('td', { 'data-label': 'Actions' }, h('div', { class: 'actions-cell' },
        pauseButton(q, ctx), q.failed > 0 ? retryFailedButton(q, ctx) : null, q.pending > 0 ? cancelPendingButton(q, ctx) : null)),
    ))),
  );
}
