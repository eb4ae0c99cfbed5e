import type { Queryable } from '../db/executor.js';
import { runDoctor, type DoctorReport } from '../doctor/run-doctor.js';

/** The doctor reads catalog views and estimates index bloat: worth sharing between browsers. */
const MAX_AGE_MS = 15_000;

/**
 * The health panel's data: the same checks as `sluice doctor`, run on the
 * dashboard's pool, at most once per 15 s however many browsers ask.
 */
export class HealthReports {
  private cached: { at: number; report: Promise<DoctorReport> } | undefined;

  constructor(
    private readonly db: Queryable,
    private readonly schema: string,
  ) {}

  get(): Promise<DoctorReport> {
    const now = Date.now();
    if (!this.cached || now - this.cached.at > MAX_AGE_MS) {
      const report = runDoctor({ db: this.db, schema: this.schema });
      this.cached = { at: now, report };
      // A failed run is not kept: the next request tries again.
      report.catch(() => {
        if (this.cached?.report === report) this.cached = undefined;
      });
    }
    return this.cached.report;
  }
}
