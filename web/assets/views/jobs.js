// The job browser: filters in the address (so a view can be bookmarked),
// keyset pages ("newer" / "older"), and live reload of the first page.
import { get, post } from '../api.js';
import { h, replace } from '../dom.js';
import { relative, time } from '../format.js';
import { badge, confirmed, keepFocus } from '../ui.js';

const STATUSES = ['pending', 'processing', 'completed', 'failed', 'cancelled'];
const FILTERS = ['queue', 'status', 'task', 'from', 'until', 'field', 'value'];
/** A payload search walks the ids newest first: it takes no time window and pages only backwards. */
const NOT_WITH_FIELD = new Set(['from', 'until', 'after']);

/**
 * @param {HTMLElement} main
 * @param {{ params: URLSearchParams, overview: any, navigate: (hash: string) => void }} ctx
 */
export function jobsView(main, ctx) {
  const params = ctx.params;
  const list = h('div', { class: 'table-box', 'aria-live': 'off' });
  const pager = h('nav', { class: 'pager', 'aria-label': 'Pages' });
  const queues = (ctx.overview?.queues ?? []).map((/** @type {any} */ q) => q.queue);

  const form = h('form', { class: 'filters', role: 'search', onsubmit: (/** @type {SubmitEvent} */ e) => {
    e.preventDefault();
    const data = new FormData(/** @type {HTMLFormElement} */ (e.target));
    const next = new URLSearchParams();
    for (const key of FILTERS) {
      const value = String(data.get(key) ?? '').trim();
      // datetime-local gives local time without a zone; the address keeps an exact instant.
      if (value) next.set(key, key === 'from' || key === 'until' ? new Date(value).toISOString() : value);
    }
    ctx.navigate(`#/jobs${next.size ? `?${next}` : ''}`);
  } },
    field('Queue', h('input', { name: 'queue', id: 'f-queue', value: params.get('queue') ?? '', list: 'known-queues', autocomplete: 'off' })),
    h('datalist', { id: 'known-queues' }, queues.map((/** @type {string} */ q) => h('option', { value: q }))),
    field('Status', h('select', { name: 'status', id: 'f-status' },
      h('option', { value: '' }, 'any'),
      STATUSES.map((s) => h('option', { value: s, selected: params.get('status') === s }, s)))),
    field('Task', h('input', { name: 'task', id: 'f-task', value: params.get('task') ?? '', autocomplete: 'off' })),
    field('Created from', h('input', { type: 'datetime-local', step: 1, name: 'from', id: 'f-from', value: localInput(params.get('from')) })),
    field('Created before', h('input', { type: 'datetime-local', step: 1, name: 'until', id: 'f-until', value: localInput(params.get('until')) })),
    field('Payload field', h('input', { name: 'field', id: 'f-field', value: params.get('field') ?? '', placeholder: 'user.id', autocomplete: 'off' })),
    field('equals', h('input', { name: 'value', id: 'f-value', value: params.get('value') ?? '', autocomplete: 'off' })),
    h('button', { type: 'submit' }, 'Filter'),
  );
  const searching = Boolean(params.get('field'));
  const ignored = searching && (params.get('from') || params.get('until'))
    ? h('p', { class: 'note' }, 'A payload search ignores the time filters.')
    : null;
  replace(main, h('h1', null, 'Jobs'), form, ignored, list, pager);

  let loading = false;
  let again = false;
  /** Ids already on screen: rows that arrive later are marked so the eye finds them. @type {Set<string> | undefined} */
  let seen;
  let shown = '';
  const load = async () => {
    if (loading) {
      again = true;
      return;
    }
    loading = true;
    try {
      const keys = [...FILTERS, 'before', 'after'].filter((k) => !(searching && NOT_WITH_FIELD.has(k)));
      const query = Object.fromEntries(keys.map((k) => [k, params.get(k) ?? undefined]));
      const page = await get('jobs', query);
      // Redraw only on a change (keeps the reader's selection and the "new" marks).
      const text = JSON.stringify(page);
      if (text === shown) return;
      shown = text;
      const fresh = new Set(seen ? page.jobs.map((/** @type {any} */ j) => j.id).filter((/** @type {string} */ id) => !seen?.has(id)) : []);
      seen = new Set([...(seen ?? []), ...page.jobs.map((/** @type {any} */ j) => j.id)]);
      keepFocus(list, () => replace(list, jobTable(page.jobs, load, fresh)));
      replace(pager, pageLinks(page, params));
    } catch (err) {
      shown = '';
      replace(list, h('p', { class: 'error', role: 'alert' }, err instanceof Error ? err.message : String(err)));
    } finally {
      loading = false;
      if (again) {
        again = false;
        void load();
      }
    }
  };
  void load();

  // Only the first page follows the live feed: a page further back is a fixed
  // window the user is reading, and new jobs would only push it around.
  const live = !params.get('before') && !params.get('after');
  return {
    onJobs: (/** @type {{ queue: string }} */ e) => {
      const queue = params.get('queue');
      if (live && (!queue || !e.queue || e.queue === queue)) void load();
    },
    onOverview: () => live && void load(),
  };
}

/** An ISO time as the value of a datetime-local input (local time, no zone). @param {string | null} iso */
function localInput(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return '';
  return new Date(d.getTime() - d.getTimezoneOffset() * 60_000).toISOString().slice(0, 19);
}

/** @param {string} label @param {HTMLElement} control */
function field(label, control) {
  return h('label', { for: control.id }, h('span', null, label), control);
}

/** @param {any[]} jobs @param {() => void} reload @param {Set<string>} fresh */
function jobTable(jobs, reload, fresh) {
  if (jobs.length === 0) return h('p', null, 'No jobs match.');
  return h('table', { class: 'stack jobs' },
    h('caption', { class: 'sr-only' }, 'Jobs, newest first'),
    h('thead', null, h('tr', null,
      ['ID', 'Queue', 'Task', 'Status', 'Attempts', 'Created', 'Last error', ''].map((t) => h('th', { scope: 'col' }, t)))),
    h('tbody', null, jobs.map((job) => h('tr', { 'data-job-id': job.id, 'data-status': job.status, class: fresh.has(job.id) ? 'fresh' : undefined },
      h('td', { 'data-label': 'ID' }, h('a', { href: `#/jobs/${job.id}` }, job.id)),
      h('td', { 'data-label': 'Queue' }, job.queue),
      h('td', { 'data-label': 'Task' }, job.task),
      h('td', { 'data-label': 'Status' }, badge(job.status), job.archived ? h('small', { title: 'moved to the history by the pruner: read-only' }, ' archived') : null),
      h('td', { 'data-label': 'Attempts', class: 'num' }, `${job.attempts}/${job.max_attempts}`),
      h('td', { 'data-label': 'Created' }, h('time', { datetime: job.created_at, title: time(job.created_at) }, relative(job.created_at))),
      h('td', { 'data-label': 'Last error', class: 'error-cell' }, job.last_error ? firstLine(job.last_error) : ''),
      h('td', { 'data-label': '' }, !job.archived && (job.status === 'failed' || job.status === 'cancelled')
        ? h('button', {
            type: 'button',
            class: 'small',
            'data-focus-key': `retry:${job.id}`,
            'aria-label': `Retry job ${job.id}`,
            onclick: () => confirmed({
              title: `Retry job ${job.id}?`,
              text: `${job.task} on ${job.queue} goes back to pending and runs again.`,
              ok: 'Retry',
              run: () => post(`jobs/${job.id}/retry`),
              done: `Job ${job.id} queued again`,
            }).then(reload),
          }, 'Retry')
        : null),
    ))));
}

/** @param {string} text */
function firstLine(text) {
  const line = text.split('\n', 1)[0] ?? '';
  return line.length > 120 ? `${line.slice(0, 117)}…` : line;
}

/** @param {{ nextBefore: string | null, nextAfter: string | null }} page @param {URLSearchParams} params */
function pageLinks(page, params) {
  const link = (/** @type {string} */ key, /** @type {string | null} */ cursor, /** @type {string} */ label) => {
    if (!cursor) return h('span', { class: 'disabled', 'aria-disabled': 'true' }, label);
    const next = new URLSearchParams(params);
    next.delete('before');
    next.delete('after');
    next.set(key, cursor);
    return h('a', { href: `#/jobs?${next}`, rel: key === 'after' ? 'prev' : 'next' }, label);
  };
  return [link('after', page.nextAfter, '← Newer'), link('before', page.nextBefore, 'Older →')];
}
