// One job: every field, its payload and result, its errors, and the actions
// its status allows (each asks for confirmation first).
import { get, post } from '../api.js';
import { h, replace } from '../dom.js';
import { duration, relative, time } from '../format.js';
import { progressBar } from '../progress.js';
import { badge, confirmed, keepFocus } from '../ui.js';

const TIMES = [['created_at', 'Created'], ['run_at', 'Run at'], ['locked_at', 'Heartbeat'], ['updated_at', 'Updated'], ['finished_at', 'Finished']];

/** @param {HTMLElement} main @param {{ id: string, navigate: (hash: string) => void }} ctx */
export function jobView(main, ctx) {
  let shown = '';
  const load = async () => {
    try {
      const data = await get(`jobs/${encodeURIComponent(ctx.id)}`);
      const { job, audit, actions, attempts } = data;
      // Redraw only on a change: a redraw would drop the reader's text selection and scroll.
      const text = JSON.stringify(data);
      if (text === shown) return job;
      shown = text;
      keepFocus(main, () => replace(main, ...jobDetail(job, audit, new Set(actions), attempts ?? [], load, ctx.navigate)));
      return job;
    } catch (err) {
      shown = '';
      replace(main, h('h1', null, `Job ${ctx.id}`), h('p', { class: 'error', role: 'alert' }, err instanceof Error ? err.message : String(err)));
      return undefined;
    }
  };
  let queue = '';
  void load().then((job) => (queue = job?.queue ?? ''));
  return {
    onJobs: (/** @type {{ queue: string }} */ e) => {
      if (!e.queue || e.queue === queue) void load();
    },
    onOverview: () => void load(),
  };
}

/**
 * @param {any} job @param {any[]} audit @param {Set<string>} allowed the actions the server accepts for this job now
 * @param {any[]} attempts @param {() => Promise<unknown>} reload @param {(hash: string) => void} navigate
 */
function jobDetail(job, audit, allowed, attempts, reload, navigate) {
  const actions = [];
  // Only worth offering while the job waits for a later time (delayed, or a retry's backoff).
  if (allowed.has('run-now') && Date.parse(job.run_at) > Date.now()) {
    actions.push(button('run-now', 'Run now', job, {
      title: `Run job ${job.id} now?`, text: `It is due ${relative(job.run_at)}; it becomes due now and runs at the next claim.`, ok: 'Run now',
      run: () => post(`jobs/${job.id}/run-now`), done: `Job ${job.id} is due now`,
    }, reload));
  }
  if (allowed.has('retry')) {
    actions.push(button('retry', 'Retry', job, {
      title: `Retry job ${job.id}?`, text: 'It goes back to pending and runs again.', ok: 'Retry',
      run: () => post(`jobs/${job.id}/retry`), done: `Job ${job.id} queued again`,
    }, reload));
  }
  if (allowed.has('cancel')) {
    actions.push(button('cancel', 'Cancel', job, {
      title: `Cancel job ${job.id}?`,
      text: job.status === 'processing' ? 'Its handler is told to stop, and it will not be retried.' : 'It will not run.',
      ok: 'Cancel job',
      run: () => post(`jobs/${job.id}/cancel`), done: `Job ${job.id} cancelled`,
    }, reload));
  }
  if (allowed.has('delete')) {
    actions.push(button('delete', 'Delete', job, {
      title: `Delete job ${job.id}?`, text: 'The job and its history are removed for good.', ok: 'Delete',
      run: () => post(`jobs/${job.id}/delete`), done: `Job ${job.id} deleted`,
    }, async () => navigate(`#/jobs?queue=${encodeURIComponent(job.queue)}`)));
  }

  return [
    h('p', { class: 'crumbs' }, h('a', { href: `#/jobs?queue=${encodeURIComponent(job.queue)}` }, `← Jobs of ${job.queue}`)),
    h('h1', null, `Job ${job.id} `, badge(job.status)),
    allowed.size === 0 && job.status !== 'processing'
      ? h('p', { class: 'note' }, 'Archived: the pruner moved this finished job to the history, which is read-only.')
      : null,
    actions.length ? h('div', { class: 'actions' }, actions) : null,
    h('section', { class: 'card', 'aria-labelledby': 'job-facts' },
      h('h2', { id: 'job-facts', class: 'sr-only' }, 'Details'),
      h('dl', { class: 'facts' },
        fact('Queue', job.queue),
        fact('Task', job.task),
        fact('Attempts', `${job.attempts} of ${job.max_attempts}`),
        fact('Priority', job.priority),
        job.locked_by ? fact('Worker', job.locked_by) : null,
        TIMES.filter(([key]) => job[key]).map(([key, label]) =>
          fact(label, h('time', { datetime: job[key] }, time(job[key]), h('small', null, ` (${relative(job[key])})`)))),
      )),
    h('section', { class: 'card', 'aria-labelledby': 'job-payload' },
      h('h2', { id: 'job-payload' }, 'Payload'), h('pre', { tabindex: 0 }, JSON.stringify(job.payload, null, 2))),
    job.progress !== undefined && job.progress !== null
      ? h('section', { class: 'card', 'aria-labelledby': 'job-progress' },
          h('h2', { id: 'job-progress' }, 'Progress'),
          progressBar(job.progress, `Progress of job ${job.id}`) ?? null,
          typeof job.progress === 'number' ? null : h('pre', { tabindex: 0 }, JSON.stringify(job.progress, null, 2)))
      : null,
    'result' in job && job.result !== null
      ? h('section', { class: 'card', 'aria-labelledby': 'job-result' },
          h('h2', { id: 'job-result' }, 'Result'), h('pre', { tabindex: 0 }, JSON.stringify(job.result, null, 2)))
      : null,
    attemptsSection(attempts),
    historySection(job, audit),
    errorSection(job),
  ];
}

/**
 * Each run: how it ended, on which worker, when it started and how long it
 * took. Failed attempts recorded before Sluice kept their start show '–'.
 * @param {{ attempt: number, outcome: string, startedAt: string | null, endedAt: string | null, durationMs: number | null, worker: string | null, error?: string }[]} attempts
 */
function attemptsSection(attempts) {
  if (attempts.length === 0) return null;
  const at = (/** @type {string | null} */ iso) => (iso ? h('time', { datetime: iso }, time(iso)) : '–');
  return h('section', { class: 'card', 'aria-labelledby': 'job-attempts' },
    h('h2', { id: 'job-attempts' }, 'Attempts'),
    h('table', { class: 'stack attempts' },
      h('caption', { class: 'sr-only' }, 'Attempts, oldest first'),
      h('thead', null, h('tr', null, ['#', 'Outcome', 'Worker', 'Started', 'Duration', 'Ended', 'Error'].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', null, attempts.map((a) => h('tr', { 'data-attempt': a.attempt, 'data-outcome': a.outcome },
        h('td', { 'data-label': '#', class: 'num' }, a.attempt),
        h('td', { 'data-label': 'Outcome' }, badge(a.outcome === 'running' || a.outcome === 'claimed' ? 'processing' : a.outcome, a.outcome)),
        h('td', { 'data-label': 'Worker', class: 'mono' }, a.worker ?? '–'),
        h('td', { 'data-label': 'Started' }, at(a.startedAt)),
        h('td', { 'data-label': 'Duration', class: 'num' }, a.durationMs === null ? '–' : `${duration(a.durationMs)}${a.endedAt ? '' : ' so far'}`),
        h('td', { 'data-label': 'Ended' }, at(a.endedAt)),
        h('td', { 'data-label': 'Error', class: 'error-cell' }, a.error ?? ''))))));
}

const ACTION_WORDS = /** @type {Record<string, string>} */ ({ retry: 'Retried', cancel: 'Cancelled', delete: 'Deleted', run_now: 'Made due now', run_schedule: 'Enqueued from its schedule (Run now)' });

/**
 * What happened to the job, in time order: enqueued, each failed attempt, each
 * action someone took (from the audit log), finished.
 * @param {any} job @param {{ at: string, action: string, actor: string }[]} audit
 */
function historySection(job, audit) {
  /** @type {{ at: string, text: string, kind: string }[]} */
  const events = [{ at: job.created_at, text: `Enqueued on ${job.queue}`, kind: 'created' }];
  for (const e of Array.isArray(job.errors) ? job.errors : []) {
    events.push({ at: e.at, text: `Attempt ${e.attempt} failed: ${e.message ?? ''}`, kind: 'failed' });
  }
  for (const a of audit ?? []) events.push({ at: a.at, text: `${ACTION_WORDS[a.action] ?? a.action} by ${a.actor}`, kind: 'action' });
  if (job.finished_at) events.push({ at: job.finished_at, text: `Finished: ${job.status}`, kind: job.status });
  events.sort((a, b) => Date.parse(a.at) - Date.parse(b.at));
  return h('section', { class: 'card', 'aria-labelledby': 'job-history' },
    h('h2', { id: 'job-history' }, 'History'),
    h('ol', { class: 'history' }, events.map((e) => h('li', { 'data-kind': e.kind },
      h('time', { datetime: e.at }, time(e.at)), ' ', e.text))));
}

/** Every attempt's error when the job row keeps them, else the last one. @param {any} job */
function errorSection(job) {
  const errors = Array.isArray(job.errors) ? job.errors : [];
  if (errors.length === 0 && !job.last_error) return null;
  return h('section', { class: 'card', 'aria-labelledby': 'job-errors' },
    h('h2', { id: 'job-errors' }, errors.length ? 'Errors, by attempt' : 'Last error'),
    errors.length
      ? h('ol', { class: 'errors' }, errors.map((/** @type {any} */ e) => h('li', null,
          h('p', null, `Attempt ${e.attempt ?? '?'}`, e.at ? ` — ${time(e.at)}` : ''),
          h('pre', { tabindex: 0 }, e.stack ?? e.message ?? JSON.stringify(e)))))
      : h('pre', { tabindex: 0 }, job.last_error));
}

/** @param {string} label @param {unknown} value */
function fact(label, value) {
  return [h('dt', null, label), h('dd', null, value)];
}

/** @param {string} key @param {string} label @param {any} job @param {any} action @param {() => Promise<unknown>} after */
function button(key, label, job, action, after) {
  return h('button', {
    type: 'button',
    class: key === 'delete' ? 'danger' : key === 'run-now' ? 'secondary' : '',
    'data-focus-key': `${key}:${job.id}`,
    onclick: async () => {
      if ((await confirmed(action)) !== undefined) await after();
    },
  }, label);
}
