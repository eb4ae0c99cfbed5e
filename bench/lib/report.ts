import type { Row } from './context.js';

export interface TableRow extends Row {
  /** value as a percentage of the SQL-only limit, for jobs/s rows. */
  shareOfLimit: number | null;
}

/** Adds each jobs/s row's share of the SQL-only limit measured at the same size (or the nearest). */
export function withShares(rows: Row[], limits: Map<number, number>): TableRow[] {
  return rows.map((row) => {
    if (row.vsLimitAt === undefined || limits.size === 0) return { ...row, shareOfLimit: null };
    const size = [...limits.keys()].reduce((a, b) => (Math.abs(b - row.vsLimitAt!) < Math.abs(a - row.vsLimitAt!) ? b : a));
    return { ...row, shareOfLimit: Math.round((row.value / limits.get(size)!) * 1000) / 10 };
  });
}

/** A plain-text table (also valid Markdown, to paste into the README). */
export function formatTable(rows: TableRow[]): string {
  const cells = rows.map((r) => [r.scenario, r.metric, r.value.toLocaleString('en-US'), r.unit, r.shareOfLimit === null ? '' : `${r.shareOfLimit}%`]);
  const header = ['scenario', 'metric', 'value', 'unit', 'of SQL limit'];
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i]!.length)));
  const line = (c: string[]) => `| ${c.map((v, i) => (i === 2 || i === 4 ? v.padStart(widths[i]!) : v.padEnd(widths[i]!))).join(' | ')} |`;
  return [line(header), `|${widths.map((w, i) => (i === 2 || i === 4 ? `${'-'.repeat(w + 1)}:` : '-'.repeat(w + 2))).join('|')}|`, ...cells.map(line)].join('\n');
}
