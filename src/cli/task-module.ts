import { existsSync } from 'node:fs';
import { extname, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { TaskList } from '../job.js';
import { CommandFailed, UsageError } from './output.js';

/**
 * Loads the user's task module: a file whose `tasks` export, or default export,
 * maps task names to handlers. JavaScript loads as is; TypeScript needs the
 * user's loader in this process (`node --import tsx`, or NODE_OPTIONS).
 */
export async function loadTasks(path: string): Promise<TaskList> {
  const file = resolve(process.cwd(), path);
  if (!existsSync(file)) throw new UsageError(`task module not found: ${file}`);
  let mod: Record<string, unknown>;
  try {
    mod = await import(pathToFileURL(file).href);
  } catch (err) {
    const message = (err as Error).message;
    const hint = /Unknown file extension/.test(message) && ['.ts', '.mts', '.cts'].includes(extname(file))
      ? ' (for TypeScript, run with a loader: node --import tsx ./node_modules/.bin/sluice ...)'
      : '';
    throw new CommandFailed(`cannot load task module ${path}: ${firstLine(message)}${hint}`);
  }
  // A CommonJS module arrives as { default: module.exports }.
  const fromDefault = mod.default as Record<string, unknown> | undefined;
  const tasks = mod.tasks ?? (fromDefault && typeof fromDefault === 'object' && 'tasks' in fromDefault ? fromDefault.tasks : fromDefault);
  if (!tasks || typeof tasks !== 'object') {
    throw new UsageError(`task module ${path} must export \`tasks\` (or a default export) mapping task names to handlers`);
  }
  return tasks as TaskList;
}

function firstLine(text: string): string {
  return text.split('\n', 1)[0]!;
}
