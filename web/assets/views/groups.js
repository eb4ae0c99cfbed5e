// The groups view: every queue with settings (groups, limits, paused), and for
// one queue (#/groups?queue=...) its groups: how many have due jobs, run jobs
// or are held back by their limits, the busiest groups with their backlog, and
// the groups with settings of their own. Forms below the tables change a
// queue's rate limit and group defaults and a group's own settings, as the API
// and `sluice queues` do (README, "Groups, fair claims and rate limits").
import { get } from '../api.js';
import { h, replace } from '../dom.js';
import { count, duration } from '../format.js';
import { keepFocus } from '../ui.js';
import { groupSettingsForm, queueLimitsForm } from './groups-forms.js';

/** Group numbers change with every claim; the server reads a queue's pending jobs once per load. */
const RELOAD_MS = 5000;
/** Busiest groups shown. */
const TOP = 50;

/** @param {HTMLElement} main @param {{ params: URLSearchParams, overview: any }} ctx */
export function groupsView(main, ctx) {
  const queue = ctx.params.get('queue') ?? '';
  const limitsBox = h('div', { class: 'table-box' }, h('p', null, 'Loading…'));
  const groupsBox = h('div', null, queue ? h('p', null, 'Loading…') : null);
  // The last answers: the forms start from their values.
  /** @type {any[]} */
  let limits = [];
  /** @type {any} */
  let groups = null;
  /** Queues with jobs (the overview's), offered in the queue form with those with settings. @type {string[]} */
  let active = (ctx.overview?.queues ?? []).map((/** @type {any} */ q) => q.queue);
  const queueForm = queueLimitsForm({
    known: (name) => limits.find((q) => q.name === name),
    saved: () => load(),
  });
  const groupForm = queue
    ? groupSettingsForm(queue, {
        known: (group) => groups?.settings.find((/** @type {any} */ s) => s.group === group),
        saved: () => load(),
      })
    : null;
  replace(
    main,
    h('h1', null, 'Groups and limits'),
    h('section', { 'aria-labelledby': 'limits-title', class: 'card' },
      h('h2', { id: 'limits-title' }, 'Queues with settings'), limitsBox),
    queueForm.el,
    queue
      ? h('section', { 'aria-labelledby': 'groups-title', class: 'card', 'data-groups-of': queue },
          h('h2', { id: 'groups-title' }, `Groups of ${queue}`), groupsBox)
      : null,
    groupForm?.el,
  );
  const offerQueues = () => queueForm.offer([...new Set([...limits.map((q) => q.name), ...active])].sort());
  let shown = '';
  // Loads are numbered: an answer older than the one shown (a timer's load that
  // started before a save, say) is dropped, so the page never goes back in time.
  let started = 0;
  let applied = 0;
  let filled = false;
  const load = async () => {
    const mine = ++started;
    try {
      const [answer, groupsNow] = await Promise.all([
        get('limits'),
        queue ? get(`queues/${encodeURIComponent(queue)}/groups`, { top: String(TOP) }) : Promise.resolve(null),
      ]);
      if (mine < applied) return;
      applied = mine;
      limits = answer.queues;
      groups = groupsNow;
      // The selected queue's settings are in its form from the start; later reloads leave the forms alone.
      if (queue && !filled) {
        filled = true;
        queueForm.fill(limits.find((q) => q.name === queue), queue);
      }
      offerQueues();
      if (groups) {
        groupForm?.offer([...new Set([...groups.top, ...groups.settings].map((g) => g.group).filter((g) => g !== null))].sort());
      }
      const text = JSON.stringify([limits, groups]);
      if (text === shown) return;
      shown = text;
      keepFocus(limitsBox, () => replace(limitsBox, limitsTable(limits, queue, queueForm.edit)));
      if (groups && groupForm) keepFocus(groupsBox, () => replace(groupsBox, groupsPanel(groups, groupForm.edit)));
    } catch (err) {
      if (mine < applied) return;
      applied = mine;
      shown = '';
      replace(queue ? groupsBox : limitsBox, h('p', { class: 'error', role: 'alert' }, err instanceof Error ? err.message : String(err)));
    }
  };
  void load();
  const timer = setInterval(() => (main.contains(limitsBox) ? void load() : clearInterval(timer)), RELOAD_MS);
  return {
    onJobs: () => {},
    onOverview: (/** @type {any} */ o) => {
      active = o.queues.map((/** @type {any} */ q) => q.queue);
      offerQueues();
    },
  };
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

/** @param {any[]} queues @param {string} selected @param {(queue: string) => void} edit */
function limitsTable(queues, selected, edit) {
  if (queues.length === 0) {
    return h('p', null, 'No queue has settings. A queue shows up here with its first grouped job, limit or pause.');
  }
  return h('table', { class: 'stack limits' },
    h('caption', { class: 'sr-only' }, 'Group and rate limits per queue'),
    h('thead', null, h('tr', null,
      headers(['Queue', 'Claimed', 'Group limit#', 'Group rate', 'Queue rate', 'Queue limit#', 'State', 'Actions']))),
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
      h('td', { 'data-label': 'Actions' }, editButton(`edit-limits:${q.name}`, `Change the limits of ${q.name}`, () => edit(q.name))),
    ))),
  );
}

/** A button that fills a form below. @param {string} key @param {string} label @param {() => void} onclick */
function editButton(key, label, onclick) {
  return h('button', { type: 'button', class: 'small secondary', 'data-focus-key': key, 'aria-label': label, onclick }, 'Edit');
}

/** @param {any} g the answer of api/queues/:queue/groups @param {(group: string | null) => void} edit */
function groupsPanel(g, edit) {
  const editGroup = (/** @type {string | null} */ group, /** @type {string} */ where) => editButton(
    `edit-group:${where}:${group ?? ''}`,
    group === null ? 'Change the settings of the jobs without a group' : `Change the settings of group ${group}`,
    () => edit(group));
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
            headers(['Group', 'Due#', 'Later#', 'Running#', 'Weight#', 'Limit#', 'State', 'Actions']))),
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
            h('td', { 'data-label': 'Actions' }, editGroup(r.group, 'top')),
          ))))),
    g.settings.length === 0
      ? h('p', null, 'No group has settings of its own: every group has weight 1 and the queue\'s defaults.')
      : h('div', { class: 'table-box' }, h('table', { class: 'stack group-settings' },
          h('caption', null, 'Groups with settings of their own'),
          h('thead', null, h('tr', null, headers(['Group', 'Weight#', 'Limit#', 'Rate', 'Actions']))),
          h('tbody', null, g.settings.map((/** @type {any} */ s) => h('tr', { 'data-setting-group': s.group ?? '' },
            h('th', { scope: 'row', 'data-label': 'Group' }, name(s.group)),
            h('td', { class: 'num', 'data-label': 'Weight' }, count(s.weight)),
            h('td', { class: 'num', 'data-label': 'Limit' }, s.concurrencyLimit === null ? 'queue default' : count(s.concurrencyLimit)),
            h('td', { 'data-label': 'Rate' }, s.rateLimit ? rateText(s.rateLimit) : 'queue default'),
            h('td', { 'data-label': 'Actions' }, editGroup(s.group, 'settings')),
          ))))),
  ];
}
