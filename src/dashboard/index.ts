// The dashboard's public entry point, `sluice/dashboard`: kept apart from the
// main entry so that `import 'sluice'` in a worker never loads the web server.
export {
  startDashboard,
  createDashboardHandler,
  type StartDashboardOptions,
  type RunningDashboard,
  type DashboardHandler,
} from './server.js';
export { dashboardPlugin } from './plugin.js';
export type { DashboardOptions, DashboardAuthOptions } from './options.js';
export type { Overview, QueueOverview } from './overview.js';
