// The groups view: every queue with settings (groups, limits, paused), and for
// one queue (#/groups?queue=...) its groups: how many have due jobs, run jobs
// or are held back by their limits, the busiest groups with their backlog, and
// the groups with settings of their own. Read-only: settings change through the
// API or `sluice queues` (README, "Groups, fair claims and rate limits").
import { get } from '../api.js';
import { h, replace } from '../dom.js';
import { count, duration } from '../format.js';
import { keepFocus } from '../ui.js';

/** Group numbers change with every claim; the server reads a queue's pending jobs once per load. */
const RELOAD_MS = 5000;
/** Busiest groups shown. */
const TOP = 50;

/** @param {HTMLElement} main @param {{ params: URLSearchParams }} ctx */
export function groupsView(main, ctx) {
  const queue = ctx.params.get('queue') ?? '';
  const limitsBox = h('div', { class: 'table-box' }, h('p', null, 'Loading…'));
  const groupsBox = h('div', null, queue ? h('p', null, 'Loading…') : null);
  replace(
    main,
    h('h1', null, 'Groups and limits'),
    h('section', { 'aria-labelledby': 'limits-title', class: 'card' },
      h('h2', { id: 'limits-title' }, 'Queues with settings'), limitsBox),
    queue
      ? h('section', { 'aria-labelledby': 'groups-title', class: 'card', 'data-groups-of': queue },
          h('h2', { id: 'groups-title' }, `Groups of ${queue}`), groupsBox)
      : null,
  );
  let shown = '';
  const load = async () => {
    try {
      const [{ queues }, groups] = await Promise.all([
        get('limits'),
        queue ? get(`queues/${encodeURIComponent(queue)}/groups`, { top: String(TOP) }) : Promise.resolve(null),
      ]);
      const text = JSON.stringify([queues, groups]);
      if (text === shown) return;
      shown = text;
      keepFocus(limitsBox, () => replace(limitsBox, limitsTable(queues, queue)));
      if (groups) keepFocus(groupsBox, () => replace(groupsBox, groupsPanel(groups)));
    } catch (err) {
      shown = '';
      replace(queue ? groupsBox : limitsBox, h('p', { class: 'error', role: 'alert' }, err instanceof Error ? err.message : String(err)));
    }
  };
  void load();
  const timer = setInterval(() => (main.contains(limitsBox) ? void load() : clearInterval(timer)), RELOAD_MS);
  return { onJobs: () => {}, onOverview: () => {} };
}

/** "100 per 1 s, burst 10", or "–". @param {{ limit: number, intervalMs: number, burst: number } | null} rate */
function rateText(rate) {
  return rate ? `${count(rate.limit)} per ${duration(rate.intervalMs)}, burst ${count(rate.burst)}` : '–';
}

/** Column headers; a trailing # marks a column of numbers (right-aligned like them). @param {string[]} labels */
function headers(labels) {
  return labels.map((t) => t.endsWith('#')
    ? h('th', { scope: 'col', class: 'num' }, t.slice(0, -1))
    : h('th', { scope: 'col' }, t));
}

/** @param {number | null} n */
function limitText(n) {
  return n === null ? '–' : count(n);
}

/** @param {any[]} queues @param {string} selected */
function limitsTable(queues, selected) {
  if (queues.length === 0) {
    return h('p', null, 'No queue has settings. A queue shows up here with its first grouped job, limit or pause.');
  }
  return h('table', { class: 'stack limits' },
    h('caption', { class: 'sr-only' }, 'Group and rate limits per queue'),
    h('thead', null, h('tr', null,
      headers(['Queue', 'Claimed', 'Group limit#', 'Group rate', 'Queue rate', 'Queue limit#', 'State']))),
    h('tbody', null, queues.map((q) => h('tr', { 'data-queue': q.name, 'aria-current': q.name === selected ? 'true' : null },
      h('th', { scope: 'row', 'data-label': 'Queue' }, q.grouped
        ? h('a', { href: `#/groups?queue=${encodeURIComponent(q.name)}` }, q.name)
        : q.name),
      h('td', { 'data-label': 'Claimed' }, q.grouped ? 'round robin across groups' : 'in order'),
      h('td', { 'data-label': 'Group limit', class: 'num' }, limitText(q.groupConcurrency)),
      h('td', { 'data-label': 'Group rate' }, rateText(q.groupRateLimit)),
      h('td', { 'data-label': 'Queue rate' }, rateText(q.rateLimit)),
      h('td', { 'data-label': 'Queue limit', class: 'num' }, limitText(q.concurrencyLimit)),
      h('td', { 'data-label': 'State' },
        h('span', { class: `badge ${q.paused ? 'state-paused' : 'state-running'}` }, q.paused ? 'paused' : 'running')),
    ))),
  );
}

/** @param {any} g the answer of api/queues/:queue/groups */
function groupsPanel(g) {
  const name = (/** @type {string | null} */ group) => (group === null ? h('em', null, '(no group)') : group);
  return [
    h('p', { class: 'group-totals' },
      `${count(g.groups)} groups with pending or running jobs: ${count(g.groupsDue)} with due jobs, `,
      `${count(g.groupsRunning)} with running jobs, `,
      h('strong', null, `${count(g.throttled)} throttled`),
      ` (their limits hold due jobs back). ${count(g.due)} jobs due, ${count(g.running)} running.`),
    g.top.length === 0
      ? h('p', null, 'No pending or running jobs.')
      : h('div', { class: 'table-box' }, h('table', { class: 'stack groups' },
          h('caption', null, g.top.length < g.groups ? `The ${count(g.top.length)} busiest groups` : 'Every group, busiest first'),
          h('thead', null, h('tr', null,
            headers(['Group', 'Due#', 'Later#', 'Running#', 'Weight#', 'Limit#', 'State']))),
          h('tbody', null, g.top.map((/** @type {any} */ r) => h('tr', { 'data-group': r.group ?? '' },
            h('th', { scope: 'row', 'data-label': 'Group' }, name(r.group)),
            h('td', { class: 'num', 'data-label': 'Due' }, count(r.due)),
            h('td', { class: 'num', 'data-label': 'Later' }, count(r.scheduled)),
            h('td', { class: 'num', 'data-label': 'Running' }, count(r.running)),
            h('td', { class: 'num', 'data-label': 'Weight' }, count(r.weight)),
            h('td', { class: 'num', 'data-label': 'Limit' }, limitText(r.concurrencyLimit)),
            h('td', { 'data-label': 'State', 'data-state': r.throttled ? 'throttled' : 'open' }, r.throttled
              ? h('span', { class: 'badge state-paused' }, 'throttled')
              : h('span', { class: 'badge state-running' }, 'open')),
          ))))),
    g.settings.length === 0
      ? h('p', null, 'No group has settings of its own: every group has weight 1 and the queue\'s defaults.')
      : h('div', { class: 'table-box' }, h('table', { class: 'stack group-settings' },
          h('caption', null, 'Groups with settings of their own'),
          h('thead', null, h('tr', null, headers(['Group', 'Weight#', 'Limit#', 'Rate']))),
          h('tbody', null, g.settings.map((/** @type {any} */ s) => h('tr', { 'data-setting-group': s.group ?? '' },
            h('th', { scope: 'row', 'data-label': 'Group' }, name(s.group)),
            h('td', { class: 'num', 'data-label': 'Weight' }, count(s.weight)),
            h('td', { class: 'num', 'data-label': 'Limit' }, s.concurrencyLimit === null ? 'queue default' : count(s.concurrencyLimit)),
            h('td', { 'data-label': 'Rate' }, s.rateLimit ? rateText(s.rateLimit) : 'queue default'),
          ))))),
  ];
}
