import type { Command } from 'commander';
import { connectionError, loginProblem } from '../../db/connection.js';
import { runDoctor, type DoctorReport } from '../../doctor/run-doctor.js';
import { isConnectionFailure } from '../../errors.js';
import type { CheckResult } from '../../doctor/findings.js';
import { globalOptions, requireDatabaseUrl } from '../database.js';
import { ExitStatus, printJson } from '../output.js';

const EXIT_BY_STATUS = { ok: 0, warn: 1, critical: 2 } as const;
const MARK = { ok: 'ok  ', warn: 'WARN', critical: 'CRIT' } as const;

function printCheck(check: CheckResult): void {
  process.stdout.write(`[${MARK[check.status]}] ${check.title}: ${check.summary}\n`);
  if (check.advice) process.stdout.write(`       -> ${check.advice}\n`);
}

export function registerDoctor(program: Command): void {
  program
    .command('doctor')
    .description('inspect the database for what slows a Postgres queue down (exit 0 ok, 1 warn, 2 critical)')
    .option('--json', 'print the full report as JSON')
    .action(async (opts: { json?: boolean }, command: Command) => {
      const global = globalOptions(command);
      const url = requireDatabaseUrl(global);
      let report: DoctorReport;
      try {
        report = await runDoctor({ connectionString: url, schema: global.schema });
      } catch (err) {
        // Critical, not a warning: the queue's database is out of reach. It exited 1,
        // which a monitor reading exit codes took for a warning (outside review 126).
        // So is a database or role that does not exist, or a refused login (outside review 127).
        const login = loginProblem(err, url);
        if (!login && !isConnectionFailure(err)) throw err;
        const reason = err instanceof Error ? err.message.replace(/^doctor: /, '') : String(err);
        process.stderr.write(`sluice: doctor: ${login ?? connectionError(reason, url).message}\n`);
        throw new ExitStatus(2);
      }
      if (opts.json) printJson(report);
      else {
        for (const check of report.checks) printCheck(check);
        process.stdout.write(`${report.status === 'ok' ? 'all checks passed' : `status: ${report.status}`}\n`);
      }
      const code = EXIT_BY_STATUS[report.status];
      if (code !== 0) throw new ExitStatus(code);
    });
}
