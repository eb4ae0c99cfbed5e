// The page: a hash router (#/, #/jobs?..., #/jobs/<id>), the live feed, and
// the current view. Views get new data through onOverview / onJobs.
import { get } from './api.js';
import { h } from './dom.js';
import { startLive } from './live.js';
import { jobView } from './views/job.js';
import { jobsView } from './views/jobs.js';
import { overviewView } from './views/overview.js';

const main = /** @type {HTMLElement} */ (document.getElementById('main'));
const liveState = /** @type {HTMLElement} */ (document.getElementById('live-state'));

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
  } else {
    view = overviewView(main, { overview, refresh: () => void refresh() });
    document.title = 'Sluice dashboard';
  }
  for (const link of document.querySelectorAll('[data-nav]')) {
    if (/** @type {HTMLElement} */ (link).dataset.nav === section) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
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
  onOverview: (o) => {
    overview = o;
    view.onOverview?.(o);
  },
  onJobs: (e) => view.onJobs?.(e),
  onState: (state) => {
    liveState.textContent = { live: '● live', polling: '◐ polling', offline: '○ offline' }[state];
    liveState.dataset.state = state;
  },
});
