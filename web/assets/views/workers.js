// The workers view: every worker in the registry (alive ones first), its
// queues and tasks, and what it runs now, since when, with progress bars.
import { get } from '../api.js';
import { h, replace } from '../dom.js';
import { count, relative, time } from '../format.js';
import { progressBar } from '../progress.js';
import { keepFocus } from '../ui.js';

/** Workers refresh their rows every 15 s by default; running jobs change faster. */
const RELOAD_MS = 5000;

/** @param {HTMLElement} main */
export function workersView(main) {
  const box = h('div', null, h('p', null, 'Loading…'));
  replace(main, h('h1', null, 'Workers'), box);
  let shown = '';
  const load = async () => {
    try {
      const { workers } = await get('workers');
      const text = JSON.stringify(workers);
      if (text === shown) return;
      shown = text;
      keepFocus(box, () => replace(box, workerList(workers)));
    } catch (err) {
      shown = '';
      replace(box, h('p', { class: 'error', role: 'alert' }, err instanceof Error ? err.message : String(err)));
    }
  };
  void load();
  const timer = setInterval(() => (main.contains(box) ? void load() : clearInterval(timer)), RELOAD_MS);
  return { onJobs: () => void load(), onOverview: () => void load() };
}

/** @param {any[]} workers */
function workerList(workers) {
  if (workers.length === 0) {
    return h('p', null, 'No worker has registered. Workers of this version of Sluice show up here while they run.');
  }
  const alive = workers.filter((w) => w.alive).length;
  return [
    h('p', null, `${count(alive)} alive`, workers.length > alive ? `, ${count(workers.length - alive)} stopped or not heard from (dead or cut off)` : ''),
    h('table', { class: 'stack workers' },
      h('caption', { class: 'sr-only' }, 'Workers and the jobs they run'),
      h('thead', null, h('tr', null,
        ['Worker', 'State', 'Queues', 'Tasks', 'Running', 'Started', 'Last seen'].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', null, workers.map((w) => [
        h('tr', { 'data-worker-id': w.id, 'data-alive': String(w.alive) },
          h('th', { scope: 'row', 'data-label': 'Worker' }, h('span', { class: 'mono' }, w.id),
            h('small', null, ` ${w.host} · pid ${w.pid} · v${w.version}`)),
          h('td', { 'data-label': 'State' }, h('span', { class: `badge ${w.alive ? 'state-running' : 'state-dead'}` }, w.alive ? 'alive' : w.stoppedAt ? 'stopped' : 'not heard from')),
          h('td', { 'data-label': 'Queues' }, w.queues.map((/** @type {string} */ q, /** @type {number} */ i) =>
            [i ? ', ' : '', h('a', { href: `#/jobs?queue=${encodeURIComponent(q)}` }, q)])),
          h('td', { 'data-label': 'Tasks' }, w.tasks.join(', ')),
          h('td', { 'data-label': 'Running', class: 'num' }, `${count(w.runningCount)} / ${count(w.concurrency)}`),
          h('td', { 'data-label': 'Started' }, h('time', { datetime: w.startedAt, title: time(w.startedAt) }, relative(w.startedAt))),
          h('td', { 'data-label': 'Last seen' }, h('time', { datetime: w.lastSeenAt, title: time(w.lastSeenAt) }, relative(w.lastSeenAt))),
        ),
        w.running.length
          ? h('tr', { class: 'running-jobs', 'data-running-of': w.id },
              h('td', { colspan: 7, 'data-label': '' }, runningList(w)))
          : null,
      ])),
    ),
  ];
}

/** @param {any} w */
function runningList(w) {
  return h('ul', { class: 'running', 'aria-label': `Jobs running on ${w.id}` },
    w.running.map((/** @type {any} */ j) => h('li', { 'data-job-id': j.id },
      h('a', { href: `#/jobs/${j.id}` }, `#${j.id}`), ' ', h('strong', null, j.task), ` on ${j.queue} `,
      j.startedAt
        ? h('time', { datetime: j.startedAt, title: time(j.startedAt) }, `running ${relative(j.startedAt).replace(/ ago$/, '')}`)
        : h('small', null, 'claimed, waiting for a slot'),
      ' ', progressBar(j.progress, `Progress of job ${j.id}`) ?? null)),
    w.runningCount > w.running.length ? h('li', null, h('small', null, `and ${count(w.runningCount - w.running.length)} more`)) : null);
}
