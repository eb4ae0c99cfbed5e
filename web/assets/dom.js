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

/** Characters that set or override the direction of the text after them (bidi controls). */
const BIDI_CONTROLS = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/;

/**
 * `text` as it reads, kept from reordering what follows it: one holding bidi controls
 * is isolated (FSI … PDI). A name with a right-to-left override turned the names after
 * it around ("plain" read "nialp"), so a queue or task could disguise its neighbours
 * (outside review 242). Text without them is left exactly as it is.
 * @param {string} text
 */
export function isolated(text) {
  return BIDI_CONTROLS.test(text) ? `\u2068${text}\u2069` : text;
}

/** @param {Node} parent @param {unknown[]} children */
function append(parent, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(parent, child);
    else parent.appendChild(child instanceof Node ? child : document.createTextNode(isolated(String(child))));
  }
}

/** Replaces an element's content. @param {Element} el @param {...unknown} children */
export function replace(el, ...children) {
  el.textContent = '';
  append(el, children);
}
