// A job's progress as a bar, when it says how far along it is: a number is a
// percentage (ctx.progress(40)); an object may give { percent }, { pct } or
// { done, total } (also { current, total }). Anything else has no bar.
import { h } from './dom.js';

/** @param {unknown} progress @returns {number | undefined} 0..1 */
export function fractionOf(progress) {
  if (typeof progress === 'number') return clamp(progress / 100);
  if (!progress || typeof progress !== 'object') return undefined;
  const p = /** @type {Record<string, unknown>} */ (progress);
  for (const key of ['percent', 'pct', 'percentage']) if (typeof p[key] === 'number') return clamp(/** @type {number} */ (p[key]) / 100);
  const done = typeof p.done === 'number' ? p.done : p.current;
  if (typeof done === 'number' && typeof p.total === 'number' && p.total > 0) return clamp(done / p.total);
  return undefined;
}

/** @param {number} n */
function clamp(n) {
  return Number.isFinite(n) ? Math.min(1, Math.max(0, n)) : undefined;
}

/**
 * A native <progress> with its percentage as text beside it (screen readers
 * read the element's value; the text is for everyone else). Undefined when the
 * value says nothing about how far along the job is.
 * @param {unknown} progress @param {string} label what the bar is the progress of
 */
export function progressBar(progress, label) {
  const fraction = fractionOf(progress);
  if (fraction === undefined) return undefined;
  const percent = Math.round(fraction * 100);
  return h('span', { class: 'progress' },
    h('progress', { max: 100, value: percent, 'aria-label': label }, `${percent} %`),
    h('span', { class: 'progress-text' }, `${percent} %`));
}
