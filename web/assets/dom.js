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

/** @param {Node} parent @param {unknown[]} children */
function append(parent, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(parent, child);
    else parent.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replaces an element's content. @param {Element} el @param {...unknown} children */
export function replace(el, ...children) {
  el.textContent = '';
  append(el, children);
}
