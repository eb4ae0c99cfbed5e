// The cron view: every recurring schedule the workers registered, its last
// and next run, and "Run now" (one extra job, the schedule's ticks unchanged).
import { get, post } from '../api.js';
import { h, replace } from '../dom.js';
import { relative, time } from '../format.js';
import { confirmed, keepFocus } from '../ui.js';

const RELOAD_MS = 15_000;

/** @param {HTMLElement} main @param {{ navigate: (hash: string) => void }} ctx */
export function cronView(main, ctx) {
  const box = h('div', null, h('p', null, 'Loading…'));
  replace(main, h('h1', null, 'Cron schedules'), box);
  const load = async () => {
    try {
      const { schedules } = await get('schedules');
      keepFocus(box, () => replace(box, scheduleTable(schedules, ctx)));
    } catch (err) {
      replace(box, h('p', { class: 'error', role: 'alert' }, err instanceof Error ? err.message : String(err)));
    }
  };
  void load();
  // "in 3 min" must keep counting down, and a tick moves the last run.
  const timer = setInterval(() => (main.contains(box) ? void load() : clearInterval(timer)), RELOAD_MS);
  return { onJobs: () => {}, onOverview: () => {} };
}

/** @param {any[]} schedules @param {{ navigate: (hash: string) => void }} ctx */
function scheduleTable(schedules, ctx) {
  if (schedules.length === 0) {
    return h('p', null, 'No schedules. Workers started with `schedules` register theirs here.');
  }
  return h('table', { class: 'stack schedules' },
    h('caption', { class: 'sr-only' }, 'Recurring schedules'),
    h('thead', null, h('tr', null,
      ['Schedule', 'Cron', 'Task', 'Queue', 'Last tick', 'Next run', ''].map((t) => h('th', { scope: 'col' }, t)))),
    h('tbody', null, schedules.map((s) => h('tr', { 'data-schedule': s.name },
      h('th', { scope: 'row', 'data-label': 'Schedule' }, s.name),
      h('td', { 'data-label': 'Cron' }, h('code', null, s.cron), s.timezone !== 'UTC' ? h('small', null, ` ${s.timezone}`) : ' UTC'),
      h('td', { 'data-label': 'Task' }, s.task),
      h('td', { 'data-label': 'Queue' }, h('a', { href: `#/jobs?queue=${encodeURIComponent(s.queue)}&task=${encodeURIComponent(s.task)}` }, s.queue),
        s.group === null ? null : h('small', null, ` group ${s.group}`)),
      h('td', { 'data-label': 'Last tick' }, s.lastTick
        ? h('time', { datetime: s.lastTick, title: time(s.lastTick) }, relative(s.lastTick))
        : h('small', null, 'not yet')),
      h('td', { 'data-label': 'Next run' }, s.overdueSince
        // No worker ticks it (taken out of the code, or no worker runs): `sluice cron delete` removes it.
        ? h('span', { class: 'error', title: `Due since ${time(s.overdueSince)} and not enqueued: no worker is ticking this schedule` },
          'overdue since ', h('time', { datetime: s.overdueSince }, relative(s.overdueSince)))
        : s.nextRun
          ? h('time', { datetime: s.nextRun, title: time(s.nextRun) }, relative(s.nextRun))
          : h('small', null, 'none')),
      h('td', { 'data-label': '' }, h('button', {
        type: 'button',
        class: 'small',
        'data-focus-key': `run-schedule:${s.name}`,
        onclick: async () => {
          const result = /** @type {{ job: { id: string } } | undefined} */ (await confirmed({
            title: `Run ${s.name} now?`,
            text: `One ${s.task} job goes to ${s.queue} now, with the schedule's payload. Its regular runs stay as they are.`,
            ok: 'Run now',
            run: () => post(`schedules/${encodeURIComponent(s.name)}/run`),
            done: (r) => `Job ${r.job.id} enqueued`,
          }));
          if (result) ctx.navigate(`#/jobs/${result.job.id}`);
        },
      }, 'Run now')),
    ))));
}
