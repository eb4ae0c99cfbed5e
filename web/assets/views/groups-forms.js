// The forms of the groups view: a queue's rate limit and group defaults
// (POST api/queues/:queue/limits), and one group's own settings (POST
// api/queues/:queue/groups). A form shows the stored values of what it edits
// and sends only the settings the reader changed, so a save neither undoes
// someone else's change to another setting nor makes a queue grouped when only
// its rate limit changed. An emptied limit is sent as null: removed. The checks
// here are only the browser's (whole numbers, a rate needs its number of
// starts); the server's, with its message, decide.
import { post } from '../api.js';
import { h } from '../dom.js';
import { toast } from '../ui.js';

/** @typedef {{ limit: number, intervalMs?: number, burst?: number }} Rate */

/**
 * A queue's rate limit and group defaults. `fill` shows a queue's stored values
 * (from api/limits, or the answer of a save); `known` finds them by name.
 * @param {{ known: (name: string) => any, saved: () => Promise<void> }} ctx
 */
export function queueLimitsForm(ctx) {
  const name = /** @type {HTMLInputElement} */ (h('input', { name: 'queue', id: 'ql-queue', required: true, autocomplete: 'off', list: 'ql-queues' }));
  const names = h('datalist', { id: 'ql-queues' });
  const rate = rateFields('ql-rate', 'Queue rate limit', 'Most job starts of the queue per interval, across every worker.');
  const groupLimit = numberInput('ql-group-concurrency', 'group-concurrency');
  const groupRate = rateFields('ql-group-rate', 'Rate limit of each group', 'Most job starts of any one group per interval.');
  const read = () => ({ rateLimit: rate.read(), groupConcurrency: whole(groupLimit), groupRateLimit: groupRate.read() });
  /** @param {any} q */
  const stored = (q) => ({
    rateLimit: rateOf(q?.rateLimit),
    groupConcurrency: q?.groupConcurrency ?? null,
    groupRateLimit: rateOf(q?.groupRateLimit),
  });
  /** The stored values the fields were filled with, and whose. */
  let shown = { name: '', values: stored(undefined) };

  const form = settingsForm({
    attrs: { 'data-form': 'queue-limits', 'aria-labelledby': 'ql-title' },
    fields: [
      field('Queue', name),
      names,
      rate.el,
      h('fieldset', null, h('legend', null, 'Group defaults'),
        h('p', { class: 'note' }, 'A change here makes the queue claim its jobs round robin across its groups from then on.'),
        field('Most running at once per group', groupLimit),
        groupRate.el),
    ],
    hint: 'Empty a limit to remove it. The interval is 1 s and the burst a tenth of the limit unless given.',
    save: async () => {
      const queue = name.value.trim();
      // Another name typed without leaving the field: compare with that queue's stored values.
      const before = queue === shown.name ? shown.values : stored(ctx.known(queue));
      const body = changes(before, read());
      if (!body) return `Nothing to change: these are the stored settings of ${queue}.`;
      const answer = await post(`queues/${encodeURIComponent(queue)}/limits`, body);
      fill(answer.queue);
      toast(`Limits of ${queue} saved`);
      await ctx.saved();
      return undefined;
    },
  });
  /** @param {any} q stored settings, or undefined for a queue without any @param {string} [queue] */
  const fill = (q, queue = q?.name ?? '') => {
    name.value = queue;
    rate.fill(q?.rateLimit ?? null);
    groupLimit.value = q?.groupConcurrency == null ? '' : String(q.groupConcurrency);
    groupRate.fill(q?.groupRateLimit ?? null);
    shown = { name: queue, values: stored(q) };
    form.clearMessage();
  };
  name.addEventListener('change', () => fill(ctx.known(name.value.trim()), name.value.trim()));

  return {
    el: h('section', { class: 'card', 'aria-labelledby': 'ql-title' },
      h('h2', { id: 'ql-title' }, "Change a queue's limits"), form.el),
    fill,
    /** Shows a queue's stored settings and moves there. @param {string} queue */
    edit(queue) {
      fill(ctx.known(queue), queue);
      form.el.scrollIntoView({ block: 'nearest' });
      name.focus();
    },
    /** @param {string[]} queues names offered while typing */
    offer(queues) {
      if (names.childElementCount === queues.length && queues.every((q, i) => names.children[i]?.getAttribute('value') === q)) return;
      names.replaceChildren(...queues.map((q) => h('option', { value: q })));
    },
  };
}

/**
 * One group's own settings in `queue`: its weight, its limit of running jobs
 * and its rate limit; empty ones fall back to weight 1 and the queue's defaults.
 * @param {string} queue
 * @param {{ known: (group: string | null) => any, saved: () => Promise<void> }} ctx
 */
export function groupSettingsForm(queue, ctx) {
  const key = /** @type {HTMLInputElement} */ (h('input', { name: 'group', id: 'gs-group', required: true, autocomplete: 'off', list: 'gs-groups' }));
  const keys = h('datalist', { id: 'gs-groups' });
  const noGroup = /** @type {HTMLInputElement} */ (h('input', { type: 'checkbox', name: 'no-group', id: 'gs-no-group' }));
  const weight = numberInput('gs-weight', 'weight', '1');
  const limit = numberInput('gs-concurrency', 'concurrency');
  const rate = rateFields('gs-rate', 'Rate limit', 'Most job starts of this group per interval.');
  const group = () => (noGroup.checked ? null : key.value.trim());
  const read = () => ({ weight: whole(weight) ?? 1, concurrencyLimit: whole(limit), rateLimit: rate.read() });
  /** @param {any} s */
  const stored = (s) => ({ weight: s?.weight ?? 1, concurrencyLimit: s?.concurrencyLimit ?? null, rateLimit: rateOf(s?.rateLimit) });
  /** @type {{ group: string | null, values: ReturnType<typeof stored> }} */
  let shown = { group: '', values: stored(undefined) };
  const title = 'gs-title';

  const form = settingsForm({
    attrs: { 'data-form': 'group-settings', 'aria-labelledby': title },
    fields: [
      field('Group', key),
      keys,
      h('label', { class: 'check', for: 'gs-no-group' }, noGroup, h('span', null, 'the jobs without a group')),
      field('Weight (jobs per turn)', weight),
      field('Most running at once', limit),
      rate.el,
    ],
    hint: "Empty fields mean weight 1 and the queue's group defaults.",
    save: async () => {
      const g = group();
      const before = g === shown.group ? shown.values : stored(ctx.known(g));
      const body = changes(before, read());
      const who = g === null ? 'the jobs without a group' : g;
      if (!body) return `Nothing to change: these are the stored settings of ${who}.`;
      const answer = await post(`queues/${encodeURIComponent(queue)}/groups`, { group: g, ...body });
      fill(answer.group, g);
      toast(`Settings of ${who} in ${queue} saved`);
      await ctx.saved();
      return undefined;
    },
  });
  /** @param {any} s stored settings, or undefined @param {string | null} g */
  const fill = (s, g) => {
    noGroup.checked = g === null;
    key.value = g ?? '';
    syncKey();
    weight.value = String(s?.weight ?? 1);
    limit.value = s?.concurrencyLimit == null ? '' : String(s.concurrencyLimit);
    rate.fill(s?.rateLimit ?? null);
    shown = { group: g, values: stored(s) };
    form.clearMessage();
  };
  const syncKey = () => {
    key.disabled = noGroup.checked;
    key.required = !noGroup.checked;
  };
  key.addEventListener('change', () => fill(ctx.known(group()), group()));
  noGroup.addEventListener('change', () => fill(ctx.known(group()), group()));

  return {
    el: h('section', { class: 'card', 'aria-labelledby': title },
      h('h2', { id: title }, `Change a group's settings in ${queue}`), form.el),
    /** Shows a group's stored settings and moves there. @param {string | null} g */
    edit(g) {
      fill(ctx.known(g), g);
      form.el.scrollIntoView({ block: 'nearest' });
      (g === null ? noGroup : key).focus();
    },
    /** @param {string[]} groups keys offered while typing */
    offer(groups) {
      if (keys.childElementCount === groups.length && groups.every((g, i) => keys.children[i]?.getAttribute('value') === g)) return;
      keys.replaceChildren(...groups.map((g) => h('option', { value: g })));
    },
  };
}

/**
 * A form with a Save button and a line for the outcome. `save` returns a note
 * for the reader (nothing was sent) or undefined; what it throws (the server's
 * message) is shown as an alert until the next save or fill.
 * @param {{ attrs: Record<string, string>, fields: unknown[], hint: string, save: () => Promise<string | undefined> }} spec
 */
function settingsForm(spec) {
  const message = h('p', { class: 'form-message', role: 'status' });
  const error = h('p', { class: 'error form-message', role: 'alert' });
  const submit = /** @type {HTMLButtonElement} */ (h('button', { type: 'submit' }, 'Save'));
  const clearMessage = () => {
    message.textContent = '';
    error.textContent = '';
  };
  const el = h('form', {
    ...spec.attrs,
    class: 'settings-form',
    onsubmit: async (/** @type {SubmitEvent} */ e) => {
      e.preventDefault();
      clearMessage();
      submit.disabled = true;
      try {
        message.textContent = (await spec.save()) ?? '';
      } catch (err) {
        error.textContent = err instanceof Error ? err.message : String(err);
      } finally {
        submit.disabled = false;
      }
    },
  }, spec.fields, h('p', { class: 'note' }, spec.hint), error, message, h('div', { class: 'buttons' }, submit));
  return { el, clearMessage };
}

/**
 * Three fields for a rate limit: starts, per how many seconds, burst. Empty
 * starts mean no limit; an empty interval or burst, the server's default.
 * @param {string} id @param {string} legend @param {string} help
 */
function rateFields(id, legend, help) {
  const limit = numberInput(`${id}-limit`, `${id}-limit`);
  const per = numberInput(`${id}-per`, `${id}-per`, '1', 'any');
  const burst = numberInput(`${id}-burst`, `${id}-burst`);
  // The only check of its own: an interval or burst for no limit at all is a mistake, not a removal.
  const check = () => limit.setCustomValidity(limit.value === '' && (per.value !== '' || burst.value !== '')
    ? 'Give the number of starts, or empty the interval and burst too for no limit'
    : '');
  for (const input of [limit, per, burst]) input.addEventListener('input', check);
  return {
    el: h('fieldset', { class: 'rate' }, h('legend', null, legend), h('p', { class: 'note' }, help),
      field('Starts', limit), field('per seconds', per), field('burst', burst)),
    /** @param {{ limit: number, intervalMs: number, burst: number } | null} r */
    fill(r) {
      limit.value = r ? String(r.limit) : '';
      per.value = r ? String(r.intervalMs / 1000) : '';
      burst.value = r ? String(r.burst) : '';
      check();
    },
    /** @returns {Rate | null} */
    read() {
      const starts = whole(limit);
      if (starts === null) return null;
      /** @type {Rate} */
      const r = { limit: starts };
      if (per.value !== '') r.intervalMs = Math.round(Number(per.value) * 1000);
      const b = whole(burst);
      if (b !== null) r.burst = b;
      return r;
    },
  };
}

/** A stored rate limit in the shape rateFields reads it. @param {{ limit: number, intervalMs: number, burst: number } | null | undefined} r */
function rateOf(r) {
  return r ? { limit: r.limit, intervalMs: r.intervalMs, burst: r.burst } : null;
}

/** The entries of `now` that differ from `before`, or undefined for none. @param {Record<string, unknown>} before @param {Record<string, unknown>} now */
function changes(before, now) {
  const changed = Object.entries(now).filter(([k, v]) => JSON.stringify(v) !== JSON.stringify(before[k]));
  return changed.length ? Object.fromEntries(changed) : undefined;
}

/** A number field's value; null when empty. The browser refuses what is no number before submit. @param {HTMLInputElement} input */
function whole(input) {
  return input.value === '' ? null : Number(input.value);
}

/** @param {string} id @param {string} name @param {string} [placeholder] @param {string} [step] */
function numberInput(id, name, placeholder, step = '1') {
  return /** @type {HTMLInputElement} */ (h('input', { type: 'number', id, name, step, placeholder, inputmode: step === '1' ? 'numeric' : 'decimal' }));
}

/** @param {string} label @param {HTMLElement} control */
function field(label, control) {
  return h('label', { for: control.id }, h('span', null, label), control);
}
