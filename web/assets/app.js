// The page: a hash router (#/, #/jobs?..., #/jobs/<id>, #/workers, #/groups?queue=..., #/cron),
// the live feed, and the current view. Views get new data through onOverview /
// onJobs. The header says whether the page is live, and whether the dashboard
// reaches its database: an open event stream alone would say "live" while
// every panel fails.
import { get } from './api.js';
import { escapedBidi, h, replace } from './dom.js';
import { time } from './format.js';
import { startLive } from './live.js';
import { cronView } from './views/cron.js';
import { groupsView } from './views/groups.js';
import { jobView } from './views/job.js';
import { jobsView } from './views/jobs.js';
import { overviewView } from './views/overview.js';
import { workersView } from './views/workers.js';

const main = /** @type {HTMLElement} */ (document.getElementById('main'));
const liveState = /** @type {HTMLElement} */ (document.getElementById('live-state'));
const dbBanner = /** @type {HTMLElement} */ (document.getElementById('db-banner'));
const findJob = /** @type {HTMLFormElement} */ (document.getElementById('find-job'));

/** @type {any} */
let overview;
/** @type {{ onOverview?: (o: any) => void, onJobs?: (e: { queue: string }) => void }} */
let view = {};

const navigate = (/** @type {string} */ hash) => {
  if (location.hash === hash) route();
  else location.hash = hash;
};

const refresh = async () => {
  overview = await get('overview');
  view.onOverview?.(overview);
};

function route() {
  const [path = '/', query = ''] = location.hash.replace(/^#/, '').split('?');
  const params = new URLSearchParams(query);
  const jobMatch = /^\/jobs\/(\d+)$/.exec(path);
  let section = 'overview';
  if (jobMatch) {
    section = 'jobs';
    view = jobView(main, { id: /** @type {string} */ (jobMatch[1]), navigate });
    document.title = `Job ${jobMatch[1]} · Sluice`;
  } else if (path === '/jobs') {
    section = 'jobs';
    view = jobsView(main, { params, overview, navigate });
    document.title = 'Jobs · Sluice';
  } else if (path === '/workers') {
    section = 'workers';
    view = workersView(main);
    document.title = 'Workers · Sluice';
  } else if (path === '/groups') {
    section = 'groups';
    view = groupsView(main, { params, overview });
    document.title = params.get('queue') ? `Groups of ${escapedBidi(params.get('queue') ?? '')} · Sluice` : 'Groups · Sluice';
  } else if (path === '/cron') {
    section = 'cron';
    view = cronView(main, { navigate });
    document.title = 'Cron · Sluice';
  } else if (path === '/' || path === '') {
    // After an action: a failure (the database gone meanwhile) is the banner's to show,
    // not an uncaught rejection in the console (outside review 274).
    view = overviewView(main, { overview, refresh: () => void refresh().catch(() => {}) });
    document.title = 'Sluice dashboard';
  } else {
    // An address that names no page (#/jobs/-1, a mistyped link) says so: it showed the
    // overview as though the address were right (outside review 125).
    view = {};
    replace(
      main,
      h('h1', null, 'Not found'),
      h('p', { role: 'alert' }, `No page at #${path}. A job's page is #/jobs/<id>, its id a whole number. `, h('a', { href: '#/' }, 'Overview')),
    );
    document.title = 'Not found · Sluice';
  }
  for (const link of document.querySelectorAll('[data-nav]')) {
    if (/** @type {HTMLElement} */ (link).dataset.nav === section) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
}

const findJobInput = /** @type {HTMLInputElement} */ (findJob.elements.namedItem('id'));
// While a custom error is set the browser blocks the form's submit event: clear it as soon as the id is edited.
findJobInput.addEventListener('input', () => findJobInput.setCustomValidity(''));

findJob.addEventListener('submit', (e) => {
  e.preventDefault();
  const input = findJobInput;
  const id = input.value.trim();
  if (!/^\d{1,19}$/.test(id)) {
    input.setCustomValidity('A job id is a number');
    input.reportValidity();
    return;
  }
  input.setCustomValidity('');
  input.value = '';
  navigate(`#/jobs/${id}`);
});

/** @type {'live' | 'polling' | 'offline'} */
let streamState = 'polling';
/** @type {import('./live.js').DatabaseStatus} */
let database = { database: 'ok' };

function showState() {
  const down = streamState !== 'offline' && database.database !== 'ok';
  const text = streamState === 'offline'
    ? '○ offline'
    : down
      ? database.database === 'unreachable' ? '○ database unreachable · reconnecting' : '○ database error'
      : { live: '● live', polling: '◐ polling' }[streamState];
  liveState.textContent = text;
  liveState.dataset.state = down ? 'database-down' : streamState;
  dbBanner.hidden = !down;
  if (down) {
    const since = database.since ? ` since ${time(database.since)}` : '';
    dbBanner.textContent = database.database === 'unreachable'
      ? `No answer from the database${since}; the dashboard keeps trying. What you see is from before then. (${database.message ?? ''})`
      : `The database answers with an error${since}: ${database.message ?? ''}`;
  }
}

window.addEventListener('hashchange', () => {
  route();
  main.focus({ preventScroll: true });
});
route();
// The live feed brings the overview too, but a plain request can say what is wrong (not migrated, no database).
refresh().catch((err) => {
  main.prepend(h('p', { class: 'error', role: 'alert' }, err instanceof Error ? err.message : String(err)));
});

startLive({
  poll: () => get('overview'),
  status: () => get('status'),
  onOverview: (o) => {
    overview = o;
    view.onOverview?.(o);
  },
  onJobs: (e) => view.onJobs?.(e),
  onState: (state) => {
    streamState = state;
    showState();
  },
  onDatabase: (status) => {
    const recovered = database.database !== 'ok' && status.database === 'ok';
    database = status;
    showState();
    // Panels that failed meanwhile load again.
    if (recovered) {
      for (const error of main.querySelectorAll('.error[role="alert"]')) error.remove();
      refresh().catch(() => {});
      view.onJobs?.({ queue: '' });
    }
  },
});
