// m-common.js - small pieces shared by the metrics, agents, environments and diagnoses views:
//
//   sortTable({ columns, rows, sort, onSort, rowAttrs, empty })  a table whose headers sort
//   poller(fn, ms)            runs fn now and every ms after it finished; .stop() ends it
//   methodName(full)          a short method name with the full JVM form on hover
//   stateBadge(state)         RUNNING / active good, SHUTDOWN / ended muted, others warn
//   confirmDialog(text, ok)   a modal yes/no question (a <dialog>), resolves to a boolean
//   errorText(e)              what an ApiError or any error says, for inline messages
//   windowQuery(q)            { last } or { from, to } from the hash query
//   pct(x), rate(x), msCell(x) number formats the tables share
//   rateCell(row)             a row's rate, with the time it is per second of on hover
import {append, clear, h} from './dom.js';
import {count, method as splitMethod, ms} from './format.js';

// columns: [{ key, title, get(row) -> Node|string, sort(row) -> number|string, class, hint }]
// sort: { key, dir: 'asc'|'desc' } or null. Sorting happens here; onSort(key, dir) lets the
// view remember it (in the hash).
export function sortTable({columns, rows, sort, onSort, rowAttrs, empty, className = ''}) {
  const sorted = sortRows(rows, columns, sort);
  const head = h('tr', null, columns.map((c) => headerCell(c, sort, onSort)));
  const body =
      h('tbody', null,
        sorted.map(
            (r) => h('tr', rowAttrs ? rowAttrs(r) : null, columns.map((c) => h('td', {class: c.class}, c.get(r))))));
  if (!sorted.length && empty) body.append(h('tr', {class: 'm-empty-row'}, h('td', {colspan: columns.length}, empty)));
  return h('table', {class: `grid m-table ${className}`}, h('thead', null, head), body);
}

function headerCell(c, sort, onSort) {
  if (!c.sort || !onSort) return h('th', {class: c.class, title: c.hint}, c.title);
  const active = sort && sort.key === c.key;
  const next = active && sort.dir === 'desc' ? 'asc' : 'desc';
  const arrow = active ? (sort.dir === 'desc' ? ' ▾' : ' ▴') : '';
  return h(
      'th',
      {
        class: `${c.class || ''} m-sortable${active ? ' m-sorted' : ''}`,
        title: c.hint || `Sort by ${c.title}`,
        onclick: () => onSort(c.key, next)
      },
      c.title,
      arrow,
  );
}

function sortRows(rows, columns, sort) {
  const col = sort && columns.find((c) => c.key === sort.key && c.sort);
  if (!col) return rows.slice();
  const sign = sort.dir === 'asc' ? 1 : -1;
  return rows.slice().sort((a, b) => {
    const x = col.sort(a);
    const y = col.sort(b);
    if (typeof x === 'string' || typeof y === 'string') return sign * String(x).localeCompare(String(y));
    return sign * ((x ?? -Infinity) - (y ?? -Infinity));
  });
}

// Runs fn at once, then every ms after each run ended (never two at a time). A hidden tab
// skips turns.
export function poller(fn, msEvery) {
  let timer = null;
  let stopped = false;
  async function turn() {
    if (stopped) return;
    if (!document.hidden) {
      try {
        await fn();
      } catch (e) {
        console.warn('poll', e);
      }
    }
    if (!stopped) timer = setTimeout(turn, msEvery);
  }
  turn();
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}

// "pkg.Class.name(desc)" as "Class.name" with the class's package muted; full on hover.
export function methodName(full, {withPackage = false, className = ''} = {}) {
  const m = splitMethod(full || '');
  const pkg = m.cls.includes('.') ? m.cls.slice(0, m.cls.lastIndexOf('.') + 1) : '';
  return h(
      'span',
      {class: `m-method ${className}`, title: full},
      withPackage && pkg ? h('span', {class: 'm-pkg'}, pkg) : null,
      h('span', {class: 'm-short'}, m.short || full),
      m.desc ? h('span', {class: 'm-desc'}, m.desc.length > 2 ? '(…)' : '()') : null,
  );
}

const GOOD = new Set(['RUNNING', 'FULL', 'ACTIVE', 'CONNECTED', 'OK']);
const MUTED = new Set(['SHUTDOWN', 'ENDED', 'STOPPED', 'DETACHED']);

export function stateBadge(state) {
  const s = String(state || 'unknown');
  const u = s.toUpperCase();
  const kind = GOOD.has(u) ? 'good' : MUTED.has(u) ? '' : 'warn';
  return h('span', {class: `badge ${kind}`}, s);
}

// A modal question; Escape or "Cancel" answers false.
export function confirmDialog(text, okLabel = 'OK', {danger = false, detail = ''} = {}) {
  return new Promise((resolve) => {
    const dlg = h('dialog', {class: 'm-dialog'});
    const done = (v) => {
      dlg.close();
      dlg.remove();
      resolve(v);
    };
    dlg.append(
        h('p', {class: 'm-dialog-text'}, text),
        detail ? h('p', {class: 'm-dialog-detail muted'}, detail) : null,
        h(
            'div',
            {class: 'm-dialog-buttons'},
            h('button', {type: 'button', onclick: () => done(false)}, 'Cancel'),
            h('button', {type: 'button', class: danger ? 'danger m-strong' : 'primary', onclick: () => done(true)},
              okLabel),
            ),
    );
    dlg.addEventListener('cancel', (e) => {
      e.preventDefault();
      done(false);
    });
    document.body.append(dlg);
    dlg.showModal();
    dlg.querySelector('button:last-child').focus();
  });
}

export function errorText(e) {
  if (!e) return '';
  if (e.status) return `${e.message} (HTTP ${e.status})`;
  return e.message || String(e);
}

// The time window of a metrics-like query from the hash: from/to win over last.
export function windowQuery(q, defaultLast = '1h') {
  const from = q.get('from');
  const to = q.get('to');
  if (from) return {from, to: to || undefined};
  return {last: q.get('last') || defaultLast};
}

export function pct(x, digits = 1) {
  if (x === null || x === undefined || Number.isNaN(x)) return '—';
  if (x > 0 && x * 100 < 0.01) return '<0.01 %';
  return `${(x * 100).toFixed(digits)} %`;
}

export function rate(x) {
  if (x === null || x === undefined) return '—';
  if (x >= 100) return x.toFixed(0);
  if (x >= 1) return x.toFixed(2);
  if (x === 0) return '0';
  return x.toFixed(3);
}

// The API divides a count by the part of the window since the JVMs began reporting
// (rate_seconds): say over how long, since it is less than the window for a fresh
// deployment or a JVM started within it.
export function rateCell(r) {
  const secs = r.rate_seconds;
  if (!secs) return rate(r.rate);
  const span = secs >= 5400 ? `${(secs / 3600).toFixed(1)} h` :
      secs >= 90 ? `${Math.round(secs / 60)} min` :
                   `${Math.round(secs)} s`;
  return h('span', {title: `${count(r.count)} calls over ${span} of reports in the window`}, rate(r.rate));
}

export function msCell(x) {
  return x === null || x === undefined ? '—' : ms(x);
}

// A label + control pair for toolbars.
export function field(label, control, hint) {
  return h('label', {class: 'm-field', title: hint}, h('span', null, label), control);
}

export function select(options, value, onchange, attrs = {}) {
  return h(
      'select',
      {...attrs, onchange: (e) => onchange(e.target.value)},
      options.map(([v, text]) => h('option', {value: v, selected: String(v) === String(value)}, text)),
  );
}

// Empties el and appends children (nodes, strings, arrays of them; null/false skipped).
export function replace(el, ...children) {
  return append(clear(el), children);
}

// A number cell with a bar behind it showing share (0..1) of the column's largest value.
export function barCell(text, share, color = '#dbeafe') {
  const p = Math.max(0, Math.min(100, share * 100)).toFixed(1);
  return h(
      'span',
      {class: 'm-bar-cell', style: {backgroundImage: `linear-gradient(to right, ${color} ${p}%, transparent ${p}%)`}},
      text);
}
