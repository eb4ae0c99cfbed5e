import { spawnSync } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { extname, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { inspect } from 'node:util';
import type { TaskList } from '../job.js';
import { CommandFailed, UsageError } from './output.js';

/** What a task module gives the worker: its handlers, the schedules it ticks and its payload schemas, if any. */
export interface TaskModule {
  tasks: TaskList;
  /** As the Worker's `schedules` option; the Worker checks them (a ConfigError). */
  schedules?: unknown;
  /** As the Worker's `schemas` option; the Worker checks them (a ConfigError). */
  schemas?: unknown;
}

/**
 * Loads the user's task module: a file whose `tasks` export, or default export,
 * maps task names to handlers, and whose `schedules` export (optional) lists
 * recurring jobs, as `new Worker({ schedules })` takes them, and whose `schemas`
 * export (optional) validates payloads, as `new Worker({ schemas })` does (outside
 * review 221: it was ignored, and handlers got payloads unchecked). JavaScript loads as
 * is; TypeScript needs the user's loader in this process (`node --import tsx`, or NODE_OPTIONS).
 */
export async function loadTasks(path: string): Promise<TaskModule> {
  const file = resolve(process.cwd(), path);
  if (!existsSync(file)) throw new UsageError(`task module not found: ${file}`);
  if (statSync(file).isDirectory()) throw new UsageError(`task module is a directory, not a file: ${file}`);
  let mod: Record<string, unknown>;
  // A top-level await that never settles, with nothing else to run: Node ends the
  // process with status 13 and no word (outside review 166). Said here, as status 1.
  const unsettled = () => {
    if (process.exitCode !== 13) return;
    process.stderr.write(`sluice: cannot load task module ${path}: its top-level await never settled\n`);
    process.exitCode = 1;
  };
  process.on('exit', unsettled);
  try {
    mod = await import(pathToFileURL(file).href);
  } catch (err) {
    const message = thrownText(err);
    const hint =
      /Unknown file extension/.test(message) && ['.ts', '.mts', '.cts'].includes(extname(file))
        ? ' (for TypeScript, run with a loader: node --import tsx ./node_modules/.bin/sluice ...)'
        : '';
    const name = err instanceof Error && err.name !== 'Error' ? `${err.name}: ` : '';
    const summary = firstLine(message);
    // A loader's message may name the place itself (tsx: "…failed with 1 error: /app/tasks.ts:4:0: ERROR: …").
    const where = /\.[cm]?[jt]sx?:\d+/.test(summary) ? undefined : failedAt(err, file);
    throw new CommandFailed(`cannot load task module ${path}: ${name}${summary}${where ? ` (at ${where})` : ''}${hint}`);
  } finally {
    process.off('exit', unsettled);
  }
  // A CommonJS module arrives as { default: module.exports }; one compiled from
  // `export default` (tsc, Babel: exports.default with __esModule) as
  // { default: { __esModule, default } }, whose inner default is the export (outside
  // review 204: "task \"default\" must be a function").
  const fromDefault = esModuleDefault(mod.default) as Record<string, unknown> | undefined;
  const tasks =
    mod.tasks ??
    (fromDefault && typeof fromDefault === 'object' && 'tasks' in fromDefault
      ? fromDefault.tasks
      : withoutSchedules(fromDefault));
  // A CommonJS module that exports nothing is an empty default export: "tasks is empty" did not say whose (outside review 174).
  if (!tasks || typeof tasks !== 'object' || Object.keys(tasks).length === 0) {
    throw new UsageError(`task module ${path} must export \`tasks\` (or a default export) mapping task names to handlers`);
  }
  const other = (name: 'schedules' | 'schemas') =>
    mod[name] ?? (fromDefault && typeof fromDefault === 'object' ? fromDefault[name] : undefined);
  const [schedules, schemas] = [other('schedules'), other('schemas')];
  return {
    tasks: tasks as TaskList,
    ...(schedules === undefined ? {} : { schedules }),
    ...(schemas === undefined ? {} : { schemas }),
  };
}

/**
 * What a module threw while it loaded, as text: an Error's message, or the value
 * itself (`throw null`, `throw {}`, a rejected string) as inspect shows it. Read as
 * an Error's message, those made the loader throw a TypeError of its own, and the
 * module's reason was lost (outside review 167).
 */
function thrownText(err: unknown): string {
  try {
    if (err instanceof Error && typeof err.message === 'string') return err.message;
    return `it threw ${inspect(err, { depth: 1, breakLength: Infinity }).slice(0, 200)}`;
  } catch {
    return 'it threw a value that cannot be read';
  }
}

/** The first line, and the next one too when the first only announces it ("… 1 error:"). */
function firstLine(text: string): string {
  const [first = '', second] = text.split('\n', 2);
  return first.endsWith(':') && second ? `${first} ${second.trim()}` : first;
}

/** `file:///a/b.js:3` or `/a/b.js:3:7`, as a path with its line (and column). */
const LOCATION = /((?:file:\/\/|\/)[^\s()]+?):(\d+)(?::(\d+))?\)?$/;

function showLocation(match: RegExpExecArray): string {
  const path = match[1]!.startsWith('file:') ? fileURLToPath(match[1]!) : match[1]!;
  return `${path}:${match[2]}${match[3] ? `:${match[3]}` : ''}`;
}

/**
 * Where loading the task module failed: the file and line, which the message
 * alone does not say. An error thrown while the module ran has it in its stack;
 * a CommonJS syntax error on its first stack line. An ES module's syntax error
 * has it nowhere (Node keeps it to print it when the error goes uncaught), so the
 * import is tried once more in a child process whose stderr shows it: that only
 * parses, since an ES module graph runs nothing until every file in it has parsed.
 */
function failedAt(err: unknown, file: string): string | undefined {
  const stack = err instanceof Error ? (err.stack ?? '') : '';
  const lines = stack.split('\n');
  const first = LOCATION.exec(lines[0] ?? '');
  if (first) return showLocation(first);
  for (const line of lines) {
    // The first frame in the application's code: not Node's, not a package's (a loader).
    const frame = /^\s+at /.test(line) && !/node:|node_modules/.test(line) ? LOCATION.exec(line) : null;
    if (frame) return showLocation(frame);
  }
  if (!(err instanceof SyntaxError)) return undefined;
  const child = spawnSync(
    process.execPath,
    [...process.execArgv, '--input-type=module', '-e', `await import(${JSON.stringify(pathToFileURL(file).href)})`],
    {
      encoding: 'utf8',
      timeout: 10_000,
    },
  );
  const line = child.stderr?.split('\n').find((l) => LOCATION.test(l.trim()));
  return line ? showLocation(LOCATION.exec(line.trim())!) : undefined;
}

/**
 * `exports` of a CommonJS module compiled from ES syntax (__esModule set): its
 * default export, when it has one; none when it has neither that nor `tasks` (its
 * named exports are not a task map, as an ES module's are not: outside review 262
 * got 'task "handlers" must be a function' for `export const handlers`).
 */
function esModuleDefault(value: unknown): unknown {
  if (value === null || typeof value !== 'object') return value;
  const compiled = value as { __esModule?: unknown; default?: unknown; tasks?: unknown };
  if (compiled.__esModule !== true || compiled.tasks !== undefined) return value;
  return compiled.default;
}

/**
 * A CommonJS module's exports taken as the task map: without its `schedules` and
 * `schemas`, which are no tasks (outside review 206: a scheduler-only module was
 * told its task "schedules" must be a function, not that it exports no tasks).
 */
function withoutSchedules(exported: Record<string, unknown> | undefined): Record<string, unknown> | undefined {
  if (!exported || typeof exported !== 'object' || !('schedules' in exported || 'schemas' in exported)) return exported;
  const { schedules: _schedules, schemas: _schemas, ...tasks } = exported;
  return tasks;
}
