// Builds DOM nodes. Text always goes in as text nodes, never as HTML, so job
// payloads, errors and names cannot inject markup.

/**
 * h('a', { href: '#/jobs', class: 'x', onclick: fn }, 'text', childNode, [more])
 * @param {string} tag
 * @param {Record<string, unknown> | null} [attrs]
 * @param {...unknown} children
 * @returns {HTMLElement}
 */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') el.addEventListener(key.slice(2), /** @type {EventListener} */ (value));
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  append(el, children);
  return el;
}

/** Bidi controls that embed, override or isolate: they reorder the text after them. */
const BIDI_CONTROLS = /[\u202a-\u202e\u2066-\u2069]/g;

/**
 * `text` with each embedding, override or isolate control shown as its code
 * (`\u202e`), as the CLI shows them. A name with a right-to-left override turned
 * the names and the sentence after it around ("plain" read "nialp", a Retry dialog
 * read backwards; outside review 242), and one that closed an isolation itself
 * (U+2069) undid the wrapping tried first (review 243). Text without them is left
 * exactly as it is; the marks that only hint a direction (U+200E, U+200F) stay.
 * @param {string} text
 */
export function escapedBidi(text) {
  return text.replace(BIDI_CONTROLS, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/** @param {Node} parent @param {unknown[]} children */
function append(parent, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(parent, child);
    else parent.appendChild(child instanceof Node ? child : document.createTextNode(escapedBidi(String(child))));
  }
}

/** Replaces an element's content. @param {Element} el @param {...unknown} children */
export function replace(el, ...children) {
  el.textContent = '';
  append(el, children);
}
