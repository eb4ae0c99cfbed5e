import type { Command } from 'commander';
import { connectionError, loginProblem } from '../../db/connection.js';
import { runDoctor, type DoctorReport } from '../../doctor/run-doctor.js';
import { isConnectionFailure, isInsufficientPrivilege } from '../../errors.js';
import type { CheckResult } from '../../doctor/findings.js';
import { globalOptions, requireDatabaseUrl } from '../database.js';
import { ExitStatus, printJson, terminalText } from '../output.js';
import { durationWithin } from '../parse.js';

const EXIT_BY_STATUS = { ok: 0, warn: 1, critical: 2 } as const;
const MARK = { ok: 'ok  ', warn: 'WARN', critical: 'CRIT' } as const;

function printCheck(check: CheckResult): void {
  // Summaries name queues and tasks, which may hold escape codes (outside review 266).
  process.stdout.write(terminalText(`[${MARK[check.status]}] ${check.title}: ${check.summary}\n`));
  if (check.advice) process.stdout.write(terminalText(`       -> ${check.advice}\n`));
}

/** Why the checks could not run, in a line. */
function whyNoReport(err: unknown, url: string): string {
  const login = loginProblem(err, url);
  if (login) return login;
  const reason = err instanceof Error ? err.message.replace(/^doctor: /, '') : String(err);
  if (isConnectionFailure(err)) return connectionError(reason, url).message;
  if (isInsufficientPrivilege(err)) {
    return (
      reason +
      " (doctor reads every table of the schema: run it as the schema's owner, or as a role with USAGE on the schema " +
      'and read access (SELECT) to its tables)'
    );
  }
  return reason;
}

export function registerDoctor(program: Command): void {
  program
    .command('doctor')
    .description('inspect the database for what slows a Postgres queue down (exit 0 ok, 1 warn, 2 critical)')
    .option('--json', 'print the full report as JSON')
    .option(
      '--check-timeout <duration>',
      "how long each check's statement may wait (a lock, a huge table) before it is reported as held up (default 10s)",
      durationWithin(1, 2 ** 31 - 1),
    )
    .action(async (opts: { json?: boolean; checkTimeout?: number }, command: Command) => {
      const global = globalOptions(command);
      const url = requireDatabaseUrl(global);
      let report: DoctorReport;
      try {
        report = await runDoctor({
          connectionString: url,
          schema: global.schema,
          ...(opts.checkTimeout === undefined ? {} : { checkTimeoutMs: opts.checkTimeout }),
        });
      } catch (err) {
        // Critical, not a warning: the checks could not run. It exited 1, which a
        // monitor reading exit codes took for a warning: the database out of reach
        // (outside review 126), a database or role that does not exist, a refused
        // login (outside review 127), a role that may not read the schema (review 156).
        process.stderr.write(`${terminalText(`sluice: doctor: ${whyNoReport(err, url)}`)}\n`);
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
