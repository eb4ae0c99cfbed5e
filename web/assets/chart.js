// Throughput over the last hour, drawn by hand as SVG: one stacked bar per
// minute (completed, then failed on top). No chart library, no canvas, so it
// scales with the page and screen readers get a summary.

const SVG = 'http://www.w3.org/2000/svg';
const HEIGHT = 180;
const PAD = { left: 40, right: 8, top: 10, bottom: 22 };

/** @param {string} tag @param {Record<string, string | number>} attrs */
function s(tag, attrs) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  return el;
}

/** Rounds a maximum up to 1, 2 or 5 times a power of ten, for a readable axis. @param {number} n */
function niceMax(n) {
  if (n <= 0) return 1;
  const p = 10 ** Math.floor(Math.log10(n));
  return [1, 2, 5, 10].map((m) => m * p).find((m) => m >= n) ?? 10 * p;
}

/**
 * Drawn at the width it gets on screen (not scaled), so labels stay legible from phone to desktop.
 * @param {{ minute: string, completed: number, failed: number }[]} points oldest first, one per minute
 * @param {number} width in CSS pixels
 * @returns {SVGSVGElement}
 */
export function throughputChart(points, width) {
  const WIDTH = Math.max(280, Math.round(width));
  const total = points.reduce((a, p) => ({ completed: a.completed + p.completed, failed: a.failed + p.failed }), { completed: 0, failed: 0 });
  const peak = Math.max(0, ...points.map((p) => p.completed + p.failed));
  const top = niceMax(peak);
  const svg = /** @type {SVGSVGElement} */ (s('svg', { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, width: WIDTH, height: HEIGHT, role: 'img', class: 'chart' }));
  const label = `Jobs finished per minute over the last hour: ${total.completed} completed, ${total.failed} failed, at most ${peak} in one minute.`;
  svg.setAttribute('aria-label', label);
  const title = s('title', {});
  title.textContent = label;
  svg.appendChild(title);

  const plotW = WIDTH - PAD.left - PAD.right;
  const plotH = HEIGHT - PAD.top - PAD.bottom;
  const y = (/** @type {number} */ v) => PAD.top + plotH - (v / top) * plotH;

  // Counts are whole numbers: no "0.5" line on a chart whose top is 1.
  for (const v of [0, top / 2, top].filter(Number.isInteger)) {
    svg.appendChild(s('line', { x1: PAD.left, x2: WIDTH - PAD.right, y1: y(v), y2: y(v), class: 'grid' }));
    const t = s('text', { x: PAD.left - 6, y: y(v) + 4, 'text-anchor': 'end', class: 'axis' });
    t.textContent = String(v);
    svg.appendChild(t);
  }

  const slot = plotW / Math.max(points.length, 1);
  points.forEach((p, i) => {
    const x = PAD.left + i * slot + slot * 0.1;
    const w = Math.max(slot * 0.8, 1);
    if (p.completed > 0) svg.appendChild(s('rect', { x, width: w, y: y(p.completed), height: y(0) - y(p.completed), class: 'bar-completed' }));
    if (p.failed > 0) {
      const base = y(p.completed);
      svg.appendChild(s('rect', { x, width: w, y: base - (y(0) - y(p.failed)), height: y(0) - y(p.failed), class: 'bar-failed' }));
    }
  });

  const labels = [['60 min ago', PAD.left, 'start'], ['30 min', PAD.left + plotW / 2, 'middle'], ['now', WIDTH - PAD.right, 'end']];
  for (const [text, x, anchor] of labels) {
    const t = s('text', { x, y: HEIGHT - 6, 'text-anchor': anchor, class: 'axis' });
    t.textContent = String(text);
    svg.appendChild(t);
  }
  return svg;
}
