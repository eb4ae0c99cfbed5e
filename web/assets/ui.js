// Small shared pieces of the page: the confirmation dialog, the status toast,
// status badges, and keeping keyboard focus across live re-renders.
import { escapedBidi, h } from './dom.js';

/**
 * Asks before an action. Resolves true only on "Confirm". The dialog is modal
 * (focus stays inside, Escape cancels) and focus returns where it was.
 * @param {string} title @param {string} text @param {string} [okLabel]
 * @returns {Promise<boolean>}
 */
export function confirmAction(title, text, okLabel = 'Confirm') {
  const dialog = /** @type {HTMLDialogElement} */ (document.getElementById('confirm'));
  const ok = /** @type {HTMLButtonElement} */ (document.getElementById('confirm-ok'));
  const cancel = /** @type {HTMLButtonElement} */ (document.getElementById('confirm-cancel'));
  // Set here, not through h(): escaped as every text node h() makes is, or a name's
  // bidi override read the dialog backwards (outside review 252: "Resume ab?nialp").
  /** @type {HTMLElement} */ (document.getElementById('confirm-title')).textContent = escapedBidi(title);
  /** @type {HTMLElement} */ (document.getElementById('confirm-text')).textContent = escapedBidi(text);
  ok.textContent = escapedBidi(okLabel);
  const previous = /** @type {HTMLElement | null} */ (document.activeElement);
  return new Promise((resolve) => {
    const done = (/** @type {boolean} */ answer) => {
      ok.removeEventListener('click', onOk);
      cancel.removeEventListener('click', onCancel);
      dialog.removeEventListener('cancel', onCancel);
      if (dialog.open) dialog.close();
      // A live update may have re-rendered the page meanwhile: then focus the new copy of the button.
      const key = previous?.dataset.focusKey;
      const target = previous?.isConnected || !key ? previous : document.querySelector(`[data-focus-key="${CSS.escape(key)}"]`);
      /** @type {HTMLElement | null} */ (target)?.focus();
      resolve(answer);
    };
    const onOk = () => done(true);
    const onCancel = (/** @type {Event} */ e) => {
      e.preventDefault();
      done(false);
    };
    ok.addEventListener('click', onOk);
    cancel.addEventListener('click', onCancel);
    dialog.addEventListener('cancel', onCancel);
    dialog.showModal();
    cancel.focus();
  });
}

/** @type {ReturnType<typeof setTimeout> | undefined} */
let toastTimer;

/** Shows a short message, read out by screen readers. @param {string} text @param {'ok' | 'error'} [kind] */
export function toast(text, kind = 'ok') {
  const el = /** @type {HTMLElement} */ (document.getElementById('toast'));
  el.textContent = escapedBidi(text); // names in it, as in confirmAction
  el.className = `toast visible ${kind}`;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => (el.className = 'toast'), kind === 'error' ? 8000 : 4000);
}

/** @param {string} status @param {string} [text] shown instead of the status */
export function badge(status, text = status) {
  return h('span', { class: `badge status-${status}` }, text);
}

/**
 * Re-renders `container` with `render` and puts focus back on the element with
 * the same data-focus-key, so a live update never throws a keyboard user out.
 * @param {HTMLElement} container @param {() => void} render
 */
export function keepFocus(container, render) {
  const active = document.activeElement;
  const key = active instanceof HTMLElement && container.contains(active) ? active.dataset.focusKey : undefined;
  render();
  if (key) /** @type {HTMLElement | null} */ (container.querySelector(`[data-focus-key="${CSS.escape(key)}"]`))?.focus();
}

/**
 * Runs an action after confirmation and reports the outcome.
 * @param {{ title: string, text: string, ok: string, run: () => Promise<unknown>, done: string | ((r: any) => string) }} action
 */
export async function confirmed(action) {
  if (!(await confirmAction(action.title, action.text, action.ok))) return undefined;
  try {
    const result = await action.run();
    toast(typeof action.done === 'function' ? action.done(result) : action.done);
    return result;
  } catch (err) {
    toast(err instanceof Error ? err.message : String(err), 'error');
    return undefined;
  }
}
