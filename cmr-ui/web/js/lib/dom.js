// dom.js - building DOM without a framework.
//
//   h('a', { href: '#/x', class: 'link', onclick: fn }, 'text', child, [more])
//
// Strings become text nodes (never HTML), arrays are flattened, null/false are skipped.
// Attributes: on* functions become listeners, `class`, `style` (a string or an object),
// `dataset` (an object), booleans set or leave out the attribute, others setAttribute.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  if (attrs)
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith('on') && typeof v === 'function')
        el.addEventListener(k.slice(2), v);
      else if (k === 'style' && typeof v === 'object')
        Object.assign(el.style, v);
      else if (k === 'dataset')
        Object.assign(el.dataset, v);
      else if (v === true)
        el.setAttribute(k, '');
      else
        el.setAttribute(k, String(v));
    }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c))
      append(el, c);
    else
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

// A table from column definitions: [{ title, get(row) -> Node|string, class, sort(row) }].
export function table(columns, rows, {rowAttrs} = {}) {
  return h(
      'table',
      {class: 'grid'},
      h('thead', null, h('tr', null, columns.map((c) => h('th', {class: c.class}, c.title)))),
      h(
          'tbody',
          null,
          rows.map(
              (r) => h('tr', rowAttrs ? rowAttrs(r) : null, columns.map((c) => h('td', {class: c.class}, c.get(r))))),
          ),
  );
}

// A message in place of a view's content: kind 'empty' | 'error' | 'loading'.
export function notice(kind, text) {
  return h('div', {class: `notice ${kind}`, role: kind === 'error' ? 'alert' : null}, text);
}
