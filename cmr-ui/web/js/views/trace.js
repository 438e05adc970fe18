// views/trace.js - one trace (#/trace/<id>?tab=tree|waterfall|flame|raw): a header with what
// is known of it (and a warning when it is partial or lost events), and four tabs:
//
//   Call tree   expandable tree (virtualised: 100,000 calls stay fast) opened along the
//               critical path, with search, and per-row actions (traces containing the method,
//               diagnose the method)
//   Waterfall   one lane per (JVM, thread) on a shared time axis (canvas; drag to zoom)
//   Flame graph the call tree as an icicle (js/lib/flamegraph.js)
//   Raw         the Chrome trace-event and OTLP exports
//
// The tree is flattened once (js/lib/calltree.js); the tabs share that flat form.

import {criticalPath, findMatches, flattenTrace, frameTree, hasChildren, isRemote, reveal, visibleRows} from '../lib/calltree.js';
import {append, clear, h, notice} from '../lib/dom.js';
import {FlameGraph} from '../lib/flamegraph.js';
import * as fmt from '../lib/format.js';
import {completeness, completenessBadge, truncatedBadge, truncatedWhy} from '../lib/loss.js';
import {ContextMenu} from '../lib/tr-menu.js';
import {Waterfall} from '../lib/tr-waterfall.js';
import {VirtualList} from '../lib/virtual.js';

const TABS = [
  ['tree', 'Call tree'],
  ['waterfall', 'Waterfall'],
  ['flame', 'Flame graph'],
  ['raw', 'Raw'],
];
const ROW_HEIGHT = 24;
const INDENT = 14;
const MAX_INDENT_LEVELS = 48;

let view = null;

export default {
  route: 'trace',
  title: 'Trace',
  nav: false,
  navRoute: 'traces',
  async mount(el, params, ctx) {
    view = new TraceView(el, params, ctx);
    await view.start();
  },
  unmount() {
    if (view) view.destroy();
    view = null;
  },
};

class TraceView {
  constructor(el, params, ctx) {
    this.el = el;
    this.ctx = ctx;
    this.id = params.path[1] || '';
    this.tab = TABS.some(([k]) => k === params.query.get('tab')) ? params.query.get('tab') : 'tree';
    this.abort = new AbortController();
    this.panels = {};
    this.menu = new ContextMenu();
    this.agents = null;
  }

  async start() {
    if (!this.id) {
      this.el.append(notice('error', 'No trace id in the address.'));
      return;
    }
    const loading = notice('loading', `Loading trace ${this.id}…`);
    this.el.append(loading);
    let trace;
    try {
      trace = await this.ctx.api.get(`/api/traces/${encodeURIComponent(this.id)}`, null, {signal: this.abort.signal});
    } catch (e) {
      if (e.name === 'AbortError') return;
      loading.replaceWith(this.failure(e));
      return;
    }
    this.trace = trace;
    this.flat = flattenTrace(trace);
    loading.remove();
    this.render();
  }

  failure(e) {
    const text = e.status === 404 ? `No trace ${this.id}: it may have been removed by retention, or not stored yet.` :
                                    `Could not load trace ${this.id}: ${e.message}`;
    return h(
        'div', {class: 'tr-fail'}, notice('error', text),
        h('p', {class: 'notice'}, h('a', {href: '#/traces'}, '← back to the traces')));
  }

  destroy() {
    this.abort.abort();
    this.menu.destroy();
    for (const p of Object.values(this.panels))
      if (p && p.destroy) p.destroy();
  }

  // ---- header ----

  render() {
    this.tabBar = h('nav', {class: 'tr-tabs', role: 'tablist'});
    this.body = h('div', {class: 'tr-body'});
    this.el.append(h('div', {class: 'tr-page'}, this.header(), this.warning(), this.tabBar, this.body));
    this.showTab(this.tab);
  }

  header() {
    const t = this.trace;
    const root = this.flat.n ? this.flat.nodes[0] : null;
    const m = fmt.method(root ? root.method : '');
    const http = t.http && (t.http.method || t.http.path || t.http.status !== null) ? t.http : null;
    const diags = this.diagnosesOf();
    const title = h(
        'div',
        {class: 'tr-title'},
        h('a', {href: '#/traces', class: 'tr-back', title: 'back to the trace list'}, '← Traces'),
        http ? h('span', {class: 'tr-http'}, `${http.method || ''} ${http.path || ''}`.trim() || 'HTTP') : null,
        http && http.status !== null ? h('span', {class: `tl-status s${String(http.status)[0]}`}, String(http.status)) :
                                       null,
        h('span', {class: 'tr-root', title: root ? root.method : ''}, m.short || '(no root)'),
        h('span', {class: 'tr-root-cls muted'}, m.cls),
        h('span', {class: 'tl-grow'}),
        h('span', {class: 'tr-id mono', title: 'trace id'}, t.trace_id),
        h('button', {type: 'button', class: 'tr-small', onclick: () => this.copy(t.trace_id)}, 'Copy id'),
    );
    const stat = (label, value, cls) =>
        h('div', {class: `tr-stat ${cls || ''}`}, h('span', null, label), h('b', null, value));
    const stats = h(
        'div',
        {class: 'tr-stats'},
        stat('Start', fmt.time(t.start_ns)),
        stat('Duration', fmt.ns(t.duration_ns), 'tr-big'),
        stat('JVMs', fmt.count(t.jvms)),
        stat('Threads', fmt.count(t.threads)),
        stat('Segments', fmt.count(t.segments)),
        stat('Calls', fmt.count(this.flat.n)),
        stat('Events', fmt.count(t.events)),
        stat('Dropped', fmt.count(t.dropped), t.dropped > 0 ? 'bad' : ''),
        stat('Missing batches', fmt.count(t.missing_batches), t.missing_batches > 0 ? 'bad' : ''),
        t.truncated ? stat('Calls not recorded', fmt.count(t.calls_not_recorded || 0), 'bad') : null,
        h('div', {class: 'tr-stat'}, h('span', null, 'State'), completenessBadge(t), truncatedBadge(t)),
        diags.length ?
            h('div', {class: 'tr-stat'}, h('span', null, 'Diagnoses'),
              h('div', {class: 'tr-diags'},
                diags.map((d) => h('a', {class: 'badge info mono', href: `#/diagnoses/${d}`}, d.slice(0, 8))))) :
            null,
    );
    return h('section', {class: 'panel tr-head'}, title, stats);
  }

  // Diagnosis ids: the trace's own field when the API gives one, else none known here.
  diagnosesOf() {
    return Array.isArray(this.trace.diagnoses) ? this.trace.diagnoses : [];
  }

  warning() {
    const t = this.trace;
    const parts = [];
    const state = completeness(t);
    if (state === 'arriving')
      parts.push('it ended less than 30 s ago and some of its segments have not arrived yet: reload to see them');
    else if (state === 'partial')
      parts.push(
          'this trace is partial: some of its segments did not arrive (a JVM stopped, or its events were not sent)');
    if (t.dropped > 0)
      parts.push(`the agents dropped ${fmt.count(t.dropped)} event${t.dropped === 1 ? '' : 's'} of it`);
    if (t.missing_batches > 0)
      parts.push(`${fmt.count(t.missing_batches)} batch${t.missing_batches === 1 ? '' : 'es'} of events are missing`);
    if (t.truncated) {
      const n = t.calls_not_recorded || 0;
      parts.push(`truncated: ${fmt.count(n)} call${
          n === 1 ? ' was' : 's were'} not recorded, with everything they called${truncatedWhy(t)}`);
    }
    if (!parts.length) return null;
    return h(
        'div', {class: 'tr-warn', role: 'alert'}, h('b', null, 'Incomplete: '),
        `${parts.join('; ')}. Times and calls shown may be missing parts.`);
  }

  copy(text) {
    if (navigator.clipboard)
      navigator.clipboard.writeText(text).then(() => this.ctx.toast('Copied.', 'good'), () => this.ctx.toast(text));
    else
      this.ctx.toast(text);
  }

  // ---- tabs ----

  showTab(key) {
    this.tab = key;
    this.ctx.setQuery(key === 'tree' ? {} : {tab: key});
    clear(this.tabBar)
        .append(
            ...TABS.map(
                ([k, label]) =>
                    h('button', {
                      type: 'button',
                      role: 'tab',
                      class: k === key ? 'active' : null,
                      'aria-selected': k === key ? 'true' : 'false',
                      onclick: () => this.showTab(k)
                    },
                      label)),
        );
    for (const [k, p] of Object.entries(this.panels)) p.el.hidden = k !== key;
    if (!this.panels[key]) {
      const p = this.makePanel(key);
      this.panels[key] = p;
      this.body.append(p.el);
      if (p.init) p.init();
    }
    const p = this.panels[key];
    if (p.shown) p.shown();
  }

  makePanel(key) {
    if (key === 'tree') return new TreePanel(this);
    if (key === 'waterfall') return new WaterfallPanel(this);
    if (key === 'flame') return new FlamePanel(this);
    return new RawPanel(this);
  }

  // From the waterfall: show node i in the call tree.
  selectInTree(i) {
    this.showTab('tree');
    this.panels.tree.select(i, true);
  }

  // ---- actions on a method ----

  menuFor(ev, i) {
    const node = this.flat.nodes[i];
    if (!node.method) return;
    const m = node.method;
    this.menu.open(ev, [
      {
        label: 'Show traces containing this method',
        run: () => this.ctx.navigate(`#/traces?contains=${encodeURIComponent(m)}`)
      },
      {label: 'Diagnose this method…', run: () => this.diagnose(node)},
      {label: 'Copy method name', run: () => this.copy(m)},
      {sep: true},
      {label: 'Expand everything below', run: () => this.panels.tree.expandBelow(i)},
    ]);
  }

  async diagnose(node) {
    const env = await this.environmentOf(node.agent_id);
    const q = new URLSearchParams({method: node.method, trace: this.trace.trace_id});
    if (env)
      q.set('environment', env);
    else
      this.ctx.toast(`The environment of JVM ${node.jvm || node.agent_id} is not known: choose one.`);
    this.ctx.navigate(`#/diagnoses/new?${q}`);
  }

  async environmentOf(agentId) {
    if (!this.agents) {
      try {
        const r = await this.ctx.api.get('/api/agents');
        this.agents = new Map((r.agents || []).map((a) => [a.agent, a.environment]));
      } catch {
        this.agents = new Map();
      }
    }
    return this.agents.get(agentId) || '';
  }
}

// ---- tab: call tree ----

class TreePanel {
  constructor(tv) {
    this.tv = tv;
    this.flat = tv.flat;
    this.crit = criticalPath(this.flat);
    this.open = this.crit.slice();
    this.rows = visibleRows(this.flat, this.open);
    this.rowOf = null;
    this.selected = -1;
    this.matches = [];
    this.matchMark = new Uint8Array(this.flat.n);
    this.matchAt = -1;
    this.searchTimer = 0;
    this.duration = tv.trace.duration_ns || (this.flat.n ? this.flat.total[0] : 1) || 1;
    this.el = h('section', {class: 'panel tr-panel tr-tree'});
  }

  init() {
    this.el.append(this.toolbar());
    this.viewport = h('div', {class: `tr-tree-list${this.flat.hasWait ? ' has-wait' : ''}`, tabindex: 0});
    // the selected call's own data in full (a row has room for the start of it only)
    this.detail = h('div', {class: 'tr-detail', hidden: true});
    this.el.append(this.viewport, this.detail);
    if (!this.flat.n) {
      this.viewport.append(notice('empty', 'This trace has no calls.'));
      return;
    }
    this.list = new VirtualList(this.viewport, {
      rowHeight: ROW_HEIGHT,
      count: this.rows.length,
      header: this.headerRow(),
      create: () => this.createRow(),
      render: (el, k) => this.renderRow(el, this.rows[k]),
    });
    this.viewport.addEventListener('click', (ev) => this.onClick(ev));
    this.viewport.addEventListener('dblclick', (ev) => this.onDblClick(ev));
    this.viewport.addEventListener('contextmenu', (ev) => this.onContextMenu(ev));
    this.viewport.addEventListener('keydown', (ev) => this.onKey(ev));
  }

  toolbar() {
    this.searchInput = h('input', {
      type: 'search',
      placeholder: 'Find a method, SQL or URL…',
      class: 'tr-search',
      oninput: () => this.scheduleSearch(),
      onkeydown: (ev) => this.onSearchKey(ev),
    });
    this.matchInfo = h('span', {class: 'muted tr-matchinfo'});
    const btn = (label, fn, title) => h('button', {type: 'button', class: 'tr-small', onclick: fn, title}, label);
    return h(
        'div',
        {class: 'tr-toolbar'},
        this.searchInput,
        btn('↑', () => this.step(-1), 'previous match (Shift+Enter)'),
        btn('↓', () => this.step(1), 'next match (Enter)'),
        this.matchInfo,
        h('span', {class: 'tl-grow'}),
        h('span', {class: 'muted tr-hint'}, 'right-click a row for actions'),
        btn('Critical path', () => this.openCritical(), 'open the path of the largest child at every level'),
        btn('Expand all', () => this.expandAll()),
        btn('Collapse all', () => this.collapseAll()),
    );
  }

  headerRow() {
    return h(
        'div',
        {class: 'tr-row tr-row-head'},
        h('span', null, 'Method'),
        h('span', {class: 'num'}, 'Total'),
        h('span', {class: 'num'}, 'Self'),
        this.flat.hasWait ? h('span', {class: 'num', title: 'time waiting for a synchronous remote call'}, 'Wait') :
                            null,
        h('span', null, '% of trace'),
        h('span', null, 'Thread'),
        h('span', null, 'JVM'),
        h('span'),
    );
  }

  createRow() {
    const span = (cls) => h('span', {class: cls});
    const r = h('div', {class: 'tr-row'});
    const c = {
      indent: span('tr-indent'),
      toggle: span('tr-toggle'),
      name: span('tr-name'),
      cls: span('tr-cls'),
      attr: span('tr-attr mono'),
      badges: span('tr-badges'),
      total: span('num mono'),
      self: span('num mono'),
      wait: this.flat.hasWait ? span('num mono') : null,
      bar: span('tr-bar-fill'),
      pct: span('tr-bar-text'),
      thread: span('tr-thread'),
      jvm: span('tr-jvm'),
      act: h('button', {type: 'button', class: 'tr-act', title: 'actions', 'aria-label': 'actions'}, '⋯'),
    };
    r.cells = c;
    const method = h('span', {class: 'tr-method'}, c.indent, c.toggle, c.name, c.cls, c.attr, c.badges);
    append(r, [
      method, c.total, c.self, c.wait, h('span', {class: 'tr-bar'}, c.bar, c.pct), c.thread, c.jvm,
      h('span', {class: 'tr-actcell'}, c.act)
    ]);
    return r;
  }

  renderRow(r, i) {
    const f = this.flat;
    const n = f.nodes[i];
    const c = r.cells;
    const m = fmt.method(n.method);
    r.dataset.node = String(i);
    r.classList.toggle('selected', i === this.selected);
    r.classList.toggle('match', this.matchMark[i] === 1);
    r.classList.toggle('crit', this.crit[i] === 1);
    const depth = f.depth[i];
    c.indent.style.width = `${Math.min(depth, MAX_INDENT_LEVELS) * INDENT}px`;
    c.indent.textContent = depth > MAX_INDENT_LEVELS ? `${depth}` : '';
    c.toggle.textContent = hasChildren(f, i) ? (this.open[i] ? '▾' : '▸') : '';
    c.name.textContent = n.method ? m.short : kindLabel(n.kind);
    c.cls.textContent = m.cls;
    const [attr, , attrTitle] = callAttributes(n);
    c.attr.textContent = attr;
    c.attr.title = attrTitle;
    r.title = n.method || '';
    this.renderBadges(c.badges, i);
    c.total.textContent = fmt.ns(f.total[i]);
    c.self.textContent = fmt.ns(f.self[i]);
    if (c.wait) c.wait.textContent = f.wait[i] ? fmt.ns(f.wait[i]) : '';
    const pct = (100 * f.total[i]) / this.duration;
    c.bar.style.width = `${Math.min(100, pct)}%`;
    c.bar.classList.toggle('async', !!n.async);
    c.pct.textContent = `${pct >= 10 ? pct.toFixed(0) : pct.toFixed(1)}%`;
    c.thread.textContent = n.thread ? `${n.thread} #${n.thread_id}` : '';
    c.thread.title = c.thread.textContent;
    c.jvm.textContent = n.jvm || n.agent_id || '';
    c.jvm.title = n.jvm ? `${n.jvm} (agent ${n.agent_id})` : '';
  }

  renderBadges(el, i) {
    const f = this.flat;
    const n = f.nodes[i];
    const b = [];
    const badge = (cls, text, title) => b.push(h('span', {class: `badge ${cls}`, title}, text));
    if (n.kind === 'remote_caller')
      badge('info', 'remote caller', 'the caller in a JVM that is not instrumented (from the traceparent header)');
    if (n.kind === 'missing_parent') badge('warn', 'missing parent', 'the segment that called this one did not arrive');
    if (isRemote(f, i)) badge('info', 'remote', `runs in another JVM: ${n.jvm || n.agent_id}`);
    if (n.async) badge('', 'async', 'runs on its own: its time is not part of its caller\'s self time');
    if (n.exception) badge('bad', 'exception', 'left by an exception');
    if (n.running)
      badge('warn', 'running', 'had not returned when the trace was read: times up to its segment\'s latest event');
    if (n.exit_lost) badge('warn', 'exit lost', 'its exit event was lost: times are estimates');
    append(clear(el), b);
  }

  // ---- expand / collapse ----

  relayout() {
    this.rows = visibleRows(this.flat, this.open);
    this.rowOf = null;
    this.list.setCount(this.rows.length);
  }

  rowIndexOf(i) {
    if (!this.rowOf) {
      this.rowOf = new Int32Array(this.flat.n).fill(-1);
      this.rows.forEach((node, k) => (this.rowOf[node] = k));
    }
    return this.rowOf[i];
  }

  toggle(i) {
    if (!hasChildren(this.flat, i)) return;
    this.open[i] = this.open[i] ? 0 : 1;
    this.relayout();
  }

  openCritical() {
    this.open = this.crit.slice();
    this.relayout();
    this.list.scrollToIndex(0);
  }

  expandAll() {
    this.open.fill(1);
    this.relayout();
  }

  collapseAll() {
    this.open.fill(0);
    this.relayout();
    this.list.scrollToIndex(0);
  }

  expandBelow(i) {
    this.open.fill(1, i, this.flat.end[i]);
    this.relayout();
  }

  // Selects node i; reveal: open its ancestors and scroll it into view.
  select(i, scroll) {
    if (!this.list) return;
    if (scroll && reveal(this.flat, this.open, i)) this.relayout();
    this.selected = i;
    this.showDetail(i);
    if (scroll) {
      const k = this.rowIndexOf(i);
      if (k >= 0) this.list.scrollToIndex(k, 'center');
    }
    this.list.refresh();
  }

  // The selected call's attributes under the list (hidden when it has none).
  showDetail(i) {
    const [text, what] = i >= 0 ? callAttributes(this.flat.nodes[i]) : ['', ''];
    this.detail.hidden = !text;
    if (text) {
      const m = fmt.method(this.flat.nodes[i].method);
      append(
          clear(this.detail),
          [h('span', {class: 'tr-detail-what'}, `${m.short}: ${what}`), h('span', {class: 'mono'}, text)]);
    }
  }

  // ---- mouse and keys ----

  nodeOf(ev) {
    const r = ev.target.closest('.tr-row');
    return r && r.dataset.node !== undefined && !r.classList.contains('tr-row-head') ? Number(r.dataset.node) : -1;
  }

  onClick(ev) {
    const i = this.nodeOf(ev);
    if (i < 0) return;
    if (ev.target.closest('.tr-act')) {
      this.select(i, false);
      this.tv.menuFor(ev, i);
      return;
    }
    if (ev.target.closest('.tr-toggle')) this.toggle(i);
    this.select(i, false);
  }

  onDblClick(ev) {
    const i = this.nodeOf(ev);
    if (i >= 0 && !ev.target.closest('.tr-toggle, .tr-act')) this.toggle(i);
  }

  onContextMenu(ev) {
    const i = this.nodeOf(ev);
    if (i < 0) return;
    ev.preventDefault();
    this.select(i, false);
    this.tv.menuFor(ev, i);
  }

  // Up/down move the selection, right/left open/close (or go to the parent), Enter toggles.
  onKey(ev) {
    if (ev.target !== this.viewport || this.selected < 0) return;
    const k = this.rowIndexOf(this.selected);
    const i = this.selected;
    let handled = true;
    if (ev.key === 'ArrowDown' && k + 1 < this.rows.length)
      this.select(this.rows[k + 1], false);
    else if (ev.key === 'ArrowUp' && k > 0)
      this.select(this.rows[k - 1], false);
    else if (ev.key === 'ArrowRight' && hasChildren(this.flat, i) && !this.open[i])
      this.toggle(i);
    else if (ev.key === 'ArrowLeft' && this.open[i] && hasChildren(this.flat, i))
      this.toggle(i);
    else if (ev.key === 'ArrowLeft' && this.flat.parent[i] >= 0)
      this.select(this.flat.parent[i], false);
    else if (ev.key === 'Enter')
      this.toggle(i);
    else
      handled = false;
    if (handled) {
      ev.preventDefault();
      this.list.scrollToIndex(this.rowIndexOf(this.selected));
    }
  }

  // ---- search ----

  scheduleSearch() {
    clearTimeout(this.searchTimer);
    this.searchTimer = setTimeout(() => this.search(), 150);
  }

  search() {
    this.matchMark.fill(0);
    this.matches = findMatches(this.flat, this.searchInput.value);
    for (const i of this.matches) this.matchMark[i] = 1;
    this.matchAt = -1;
    if (this.matches.length)
      this.step(1);
    else {
      this.matchInfo.textContent = this.searchInput.value.trim() ? 'no match' : '';
      if (this.list) this.list.refresh();
    }
  }

  step(dir) {
    if (!this.matches.length) return;
    this.matchAt = (this.matchAt + dir + this.matches.length) % this.matches.length;
    this.matchInfo.textContent = `${fmt.count(this.matchAt + 1)} of ${fmt.count(this.matches.length)}`;
    this.select(this.matches[this.matchAt], true);
  }

  onSearchKey(ev) {
    if (ev.key !== 'Enter') return;
    ev.preventDefault();
    clearTimeout(this.searchTimer);
    if (!this.matches.length || this.searchInput.value !== this.lastQuery) {
      this.lastQuery = this.searchInput.value;
      this.search();
    } else
      this.step(ev.shiftKey ? -1 : 1);
  }

  destroy() {
    clearTimeout(this.searchTimer);
    if (this.list) this.list.destroy();
  }
}

function kindLabel(kind) {
  if (kind === 'remote_caller') return '(remote caller)';
  if (kind === 'missing_parent') return '(missing parent)';
  return '(unknown)';
}

// ---- tab: waterfall ----

class WaterfallPanel {
  constructor(tv) {
    this.tv = tv;
    this.el = h('section', {class: 'panel tr-panel tr-wf'});
  }

  init() {
    this.zoomInfo = h('span', {class: 'muted'});
    this.el.append(
        h(
            'div',
            {class: 'tr-toolbar'},
            h('span', {class: 'tl-title'}, 'Threads and JVMs over time'),
            h('span', {class: 'muted tr-hint'},
              'drag across to zoom in, double-click to zoom out; click a bar to find it in the call tree'),
            h('span', {class: 'tl-grow'}),
            this.zoomInfo,
            h('button', {type: 'button', class: 'tr-small', onclick: () => this.wf.resetZoom()}, 'Reset zoom'),
            ),
    );
    const box = h('div', {class: 'tr-canvasbox'});
    this.el.append(box);
    this.wf = new Waterfall(box, this.tv.flat, {
      onSelect: (i) => this.tv.selectInTree(i),
      onZoom: (from, to, full) => (this.zoomInfo.textContent = full ? '' : `${fmt.ns(from)} – ${fmt.ns(to)}`),
    });
  }

  destroy() {
    if (this.wf) this.wf.destroy();
  }
}

// ---- tab: flame graph ----

class FlamePanel {
  constructor(tv) {
    this.tv = tv;
    this.el = h('section', {class: 'panel tr-panel tr-flame'});
  }

  init() {
    this.el.append(flameToolbar(this, 'Width: total time · dark strip: self time · colour: package'));
    const box = h('div', {class: 'tr-canvasbox'});
    this.el.append(box);
    this.fg = new FlameGraph(box, {onZoom: (f) => showZoom(this.zoomLabel, f)});
    this.fg.setTree(frameTree(this.tv.trace));
  }

  destroy() {
    if (this.fg) this.fg.destroy();
  }
}

// The toolbar of a flame graph panel (also used by views/flame.js).
export function flameToolbar(panel, legend) {
  panel.zoomLabel = h('span', {class: 'tr-zoomlabel mono'});
  return h(
      'div',
      {class: 'tr-toolbar'},
      h('span', {class: 'muted tr-hint'}, legend),
      panel.zoomLabel,
      h('span', {class: 'tl-grow'}),
      h('span', {class: 'muted tr-hint'}, 'click a frame to zoom'),
      h('button', {type: 'button', class: 'tr-small', onclick: () => panel.fg.reset()}, 'Reset zoom'),
  );
}

export function showZoom(el, frame) {
  el.textContent = frame && frame.index > 0 ? `zoomed: ${fmt.method(frame.name).short || frame.name}` : '';
  el.title = frame ? frame.name : '';
}

// ---- tab: raw ----

class RawPanel {
  constructor(tv) {
    this.tv = tv;
    const id = encodeURIComponent(tv.trace.trace_id);
    const link = (format, label, note) => h(
        'div',
        {class: 'tr-export'},
        h('a', {
          class: 'button',
          href: `/api/traces/${id}/export?format=${format}`,
          download: `trace-${tv.trace.trace_id}-${format}.json`
        },
          label),
        h('span', {class: 'muted'}, note),
    );
    this.el = h(
        'section',
        {class: 'panel tr-panel tr-raw'},
        h('h2', null, 'Exports'),
        link('chrome', 'Download Chrome trace-event JSON', 'opens in ui.perfetto.dev and chrome://tracing'),
        link(
            'otlp', 'Download OTLP JSON', 'ExportTraceServiceRequest (protobuf JSON mapping), for OpenTelemetry tools'),
        h('div', {class: 'tr-export'},
          h('a', {class: 'button', href: `/api/traces/${id}`, target: '_blank', rel: 'noopener'}, 'Call tree JSON'),
          h('span', {class: 'muted'}, 'what this page shows, as GET /api/traces/<id> answers')),
    );
  }
}

// What a call's own attributes say, in one line, what that is, and a tooltip: a JDBC
// call's SQL (and an update's row count), an outgoing HTTP call's method, URL and status,
// an entry call's route and request headers (the environment's request_headers), an async
// servlet request's completion (the agent's own node); '' when it has none.
function callAttributes(n) {
  if (/^(jakarta|javax)\.servlet\.AsyncListener\.onComplete\(/.test(n.method || '')) {
    const text = 'the async request, from service\'s return until it completed (its status is the trace\'s)';
    return [text, 'async request', text];
  }
  const a = n.attributes;
  if (!a) return ['', '', ''];
  if (a['db.statement']) {
    const what = a['db.system'] ? `SQL on ${a['db.system']} (literals masked)` : 'SQL (literals masked)';
    const rows = a['db.response.affected_rows'];
    const text =
        rows !== undefined ? `${a['db.statement']} → ${rows} row${rows === '1' ? '' : 's'}` : a['db.statement'];
    return [text, what, `${what}: ${text}`];
  }
  if (a['url.full']) {
    const status = a['http.response.status_code'] ? ` → ${a['http.response.status_code']}` : '';
    const text = `${a['http.request.method'] || ''} ${a['url.full']}${status}`.trim();
    return [text, 'outgoing HTTP call', `outgoing HTTP call: ${text}`];
  }
  const prefix = 'http.request.header.';
  const headers = Object.keys(a).filter((k) => k.startsWith(prefix)).sort();
  const parts = headers.map((k) => `${k.slice(prefix.length)}: ${a[k]}`);
  if (a['http.route']) parts.unshift(`route ${a['http.route']}`);
  if (parts.length) {
    const text = parts.join(' · ');
    return [text, 'incoming request', `incoming request: ${text}`];
  }
  return ['', '', ''];
}
