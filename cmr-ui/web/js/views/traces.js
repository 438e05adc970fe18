// views/traces.js - the trace list (#/traces?...): filters bound to the URL, a latency scatter
// that can be brushed to narrow the time range (and the minimum duration), and a virtualised
// list of up to 100,000 traces with durations coloured by their percentile rank among the
// listed traces of the same entry point. Rows open #/trace/<id>; checked rows open a merged
// flame graph (#/flame?ids=...). With a diagnosis chosen, the list is that diagnosis' report
// (GET /api/diagnoses/<id>/report) instead of GET /api/traces. The environment choices come from
// GET /api/environments; `env` keeps the traces a JVM of that environment took part in.

import uPlot from '/vendor/uplot/uPlot.esm.js';

import {append, clear, h, notice} from '../lib/dom.js';
import * as fmt from '../lib/format.js';
import {completeness, completenessBadge, truncatedBadge, unreachableNote} from '../lib/loss.js';
import {Tooltip} from '../lib/tr-canvas.js';
import {VirtualList} from '../lib/virtual.js';

const ROW_HEIGHT = 28;
const MAX_FLAME = 200;
const PRESETS = [
  ['', 'Any time'],
  ['-15m', 'Last 15 min'],
  ['-1h', 'Last 1 h'],
  ['-6h', 'Last 6 h'],
  ['-24h', 'Last 24 h'],
  ['custom', 'Custom…'],
];
// Query keys the form owns, and what each one means to the API.
const FILTERS = [
  'from', 'to', 'min_duration', 'root', 'http_method', 'http_path', 'http_status', 'agent', 'env', 'contains',
  'diagnosis'
];
const RANK_TEXT = {
  fast: 'below the median (p50) of its entry point in this list',
  mid: 'between p50 and p95 of its entry point in this list',
  slow: 'at or above p95 of its entry point in this list',
  few: 'too few traces of this entry point to rank',
};

let view = null;

export default {
  route: 'traces',
  title: 'Traces',
  nav: true,
  async mount(el, params, ctx) {
    view = new TracesView(el, params.query, ctx);
    await view.start();
  },
  unmount() {
    if (view) view.destroy();
    view = null;
  },
};

// ---- parsing what the API accepts, for the filters applied in the browser ----

// A time filter value in ms since the epoch: ISO 8601, unix s/ms/ns, or relative -10m.
export function parseTimeMs(s, nowMs = Date.now()) {
  if (!s) return null;
  const rel = /^-(\d+(?:\.\d+)?)(ms|s|m|h|d)$/.exec(s.trim());
  if (rel) return nowMs - Number(rel[1]) * {ms: 1, s: 1e3, m: 6e4, h: 36e5, d: 864e5}[rel[2]];
  if (/^\d+$/.test(s.trim())) {
    const v = Number(s);
    return v > 1e17 ? v / 1e6 : v > 1e11 ? v : v * 1e3;
  }
  const t = Date.parse(s);
  return Number.isNaN(t) ? null : t;
}

// A duration filter value in ns: 250ms, 1.5s, 300us, 10ns; a plain number is ms.
export function parseDurationNs(s) {
  const m = /^(\d+(?:\.\d+)?)\s*(ns|us|µs|ms|s|m)?$/.exec((s || '').trim());
  if (!m) return null;
  return Number(m[1]) * {ns: 1, us: 1e3, µs: 1e3, ms: 1e6, s: 1e9, m: 6e10}[m[2] || 'ms'];
}

// A duration in ns as a filter value the API reads back (e.g. "12.5ms").
function durationParam(vns) {
  if (vns >= 1e9) return `${+ (vns / 1e9).toPrecision(3)}s`;
  if (vns >= 1e6) return `${+ (vns / 1e6).toPrecision(3)}ms`;
  return `${Math.max(1, Math.round(vns / 1e3))}us`;
}

// ---- the list's derived data ----

function entryKey(t) {
  const http = t.http && (t.http.method || t.http.path) ? ` ${t.http.method || ''} ${t.http.path || ''}` : '';
  return `${t.root_method || ''}${http}`;
}

// Per trace, its duration's percentile class among the traces of the same entry point.
function rankDurations(list) {
  const groups = new Map();
  list.forEach((t, i) => {
    const k = entryKey(t);
    if (!groups.has(k)) groups.set(k, []);
    groups.get(k).push(i);
  });
  const rank = new Array(list.length);
  for (const idx of groups.values()) {
    idx.sort((a, b) => list[a].duration_ns - list[b].duration_ns);
    const n = idx.length;
    idx.forEach((ti, r) => {
      if (n < 4)
        rank[ti] = 'few';
      else {
        // the share of the group strictly faster than this trace
        let lo = r;
        while (lo > 0 && list[idx[lo - 1]].duration_ns === list[ti].duration_ns) lo--;
        const p = lo / n;
        rank[ti] = p < 0.5 ? 'fast' : p < 0.95 ? 'mid' : 'slow';
      }
    });
  }
  return {rank, groups: groups.size};
}

function jvmName(s) {
  if (!s) return '';
  const at = s.indexOf('@');
  return at > 0 ? s.slice(0, at) : s;
}

class TracesView {
  constructor(el, query, ctx) {
    this.el = el;
    this.ctx = ctx;
    this.state = Object.fromEntries(query.entries());
    this.all = [];
    this.rows = [];
    this.rank = [];
    this.selected = new Set();
    this.abort = null;
    this.chart = null;
    this.list = null;
    this.tip = new Tooltip();
  }

  async start() {
    this.render();
    this.loadDiagnoses();
    this.loadEnvironments();
    await this.load();
  }

  destroy() {
    if (this.abort) this.abort.abort();
    if (this.chart) this.chart.destroy();
    if (this.list) this.list.destroy();
    if (this.chartResize) this.chartResize.disconnect();
    this.tip.destroy();
  }

  // ---- layout ----

  render() {
    this.countsEl = h('span', {class: 'tl-counts muted'});
    this.form = this.buildForm();
    this.chartBox = h('div', {class: 'tl-chart'});
    this.chartPanel = h(
        'section',
        {class: 'panel tl-chart-panel'},
        h(
            'div',
            {class: 'tl-chart-head'},
            h('span', {class: 'tl-title'}, 'Latency'),
            h('span', {class: 'muted'},
              'drag across to narrow the time range, diagonally to set the minimum duration too; click a dot to open its trace'),
            h('span', {class: 'tl-grow'}),
            this.rankLegend(),
            h('label', {class: 'tl-inline'}, this.logBox(), 'log scale'),
            ),
        this.chartBox,
    );
    this.listBox = h('div', {class: 'tl-list'});
    this.listMsg = h('div', {class: 'tl-list-msg'});
    this.partialBox = h('div', {class: 'tl-partial'});
    this.flameBtn =
        h('button', {class: 'primary', type: 'button', disabled: true, onclick: () => this.openFlame()},
          'Flame graph of 0 traces');
    const listPanel = h(
        'section',
        {class: 'panel tl-list-panel'},
        h(
            'div',
            {class: 'tl-list-head'},
            h('span', {class: 'tl-title'}, 'Traces'),
            this.countsEl,
            h('span', {class: 'tl-grow'}),
            h('button', {
              type: 'button',
              onclick: () => this.selectFirst(20),
              title: 'check the first 20 rows in the current order'
            },
              'Select first 20'),
            h('button', {type: 'button', onclick: () => this.clearSelection()}, 'Clear'),
            this.flameBtn,
            ),
        this.partialBox,
        this.listBox,
        this.listMsg,
    );
    this.el.append(h('div', {class: 'tl-page'}, this.form, this.chartPanel, listPanel));
  }

  logBox() {
    this.logInput = h('input', {type: 'checkbox', checked: this.state.log === '1', onchange: () => this.toggleLog()});
    return this.logInput;
  }

  rankLegend() {
    return h(
        'span',
        {
          class: 'tl-legend',
          title: 'Durations are coloured by their rank among the listed traces of the same entry point'
        },
        h('span', {class: 'tl-dot fast'}),
        '< p50',
        h('span', {class: 'tl-dot mid'}),
        'p50–p95',
        h('span', {class: 'tl-dot slow'}),
        '≥ p95 of its entry point',
    );
  }

  // ---- the filter form ----

  field(name, label, attrs = {}) {
    const input = h('input', {name, value: this.state[name] || '', autocomplete: 'off', spellcheck: 'false', ...attrs});
    return h('label', {class: `tl-field tl-f-${name}`}, label, input);
  }

  buildForm() {
    const s = this.state;
    const preset = PRESETS.some(([v]) => v === (s.from || '') && v !== 'custom') && !s.to ? s.from || '' : 'custom';
    this.rangeSel = h(
        'select',
        {name: 'range', onchange: () => this.onPreset()},
        PRESETS.map(([v, t]) => h('option', {value: v, selected: v === preset}, t)),
    );
    this.customBox = h(
        'span',
        {class: 'tl-custom'},
        this.field('from', 'From', {placeholder: '2026-11-24T02:30:00Z, -10m'}),
        this.field('to', 'To', {placeholder: 'ISO 8601, unix, -5m'}),
    );
    this.customBox.hidden = preset !== 'custom';
    this.diagSel = h('select', {name: 'diagnosis', onchange: () => this.submit()}, h('option', {value: ''}, 'None'));
    if (s.diagnosis) this.diagSel.append(h('option', {value: s.diagnosis, selected: true}, s.diagnosis));
    this.envSel = h('select', {name: 'env', onchange: () => this.submit()}, h('option', {value: ''}, 'Any'));
    if (s.env) this.envSel.append(h('option', {value: s.env, selected: true}, s.env));
    const form = h(
        'form',
        {
          class: 'panel tl-filters',
          onsubmit: (ev) => {
            ev.preventDefault();
            this.submit();
          }
        },
        h(
            'div',
            {class: 'tl-frow'},
            h('label', {class: 'tl-field'}, 'Time range', this.rangeSel),
            this.customBox,
            this.field('min_duration', 'Min duration', {placeholder: '250ms', size: 7}),
            this.field('root', 'Entry point', {placeholder: 'part of the method name'}),
            this.field('http_method', 'HTTP method', {placeholder: 'GET, P*', size: 6}),
            this.field('http_path', 'HTTP path', {placeholder: '/checkout*'}),
            this.field('http_status', 'Status', {placeholder: '5*', size: 4}),
            ),
        h(
            'div',
            {class: 'tl-frow'},
            this.field('agent', 'JVM', {placeholder: 'name@host pid N, or agent id'}),
            h('label', {
              class: 'tl-field tl-f-env',
              title: 'a JVM of this environment (as it last reported) took part in the trace'
            },
              'Environment', this.envSel),
            this.field('contains', 'Contains method', {placeholder: 'a method called anywhere'}),
            h('label', {class: 'tl-field'}, 'Diagnosis', this.diagSel),
            this.field(
                'limit', 'Limit', {type: 'number', min: 1, max: 100000, value: s.limit || '1000', class: 'tl-limit'}),
            h('label', {class: 'tl-inline tl-check'},
              h('input', {type: 'checkbox', name: 'slowest', checked: s.slowest === '1'}), 'slowest first'),
            h('span', {class: 'tl-grow'}),
            h('button', {type: 'button', onclick: () => this.resetFilters()}, 'Reset'),
            h('button', {class: 'primary', type: 'submit'}, 'Apply'),
            ),
    );
    return form;
  }

  onPreset() {
    const v = this.rangeSel.value;
    this.customBox.hidden = v !== 'custom';
    if (v === 'custom') {
      this.form.elements.from.focus();
      return;
    }
    this.form.elements.from.value = v;
    this.form.elements.to.value = '';
    this.submit();
  }

  readForm() {
    const f = this.form.elements;
    const s = {};
    for (const k of FILTERS) {
      const v = (f[k].value || '').trim();
      if (v) s[k] = v;
    }
    const limit = Math.min(100000, Math.max(1, parseInt(f.limit.value, 10) || 1000));
    if (limit !== 1000) s.limit = String(limit);
    if (f.slowest.checked) s.slowest = '1';
    if (this.state.log === '1') s.log = '1';
    if (this.state.sort) s.sort = this.state.sort;
    return s;
  }

  submit() {
    this.state = this.readForm();
    this.ctx.setQuery(this.state);
    this.load();
  }

  resetFilters() {
    this.state = {};
    this.ctx.setQuery({});
    const form = this.buildForm();
    this.form.replaceWith(form);
    this.form = form;
    this.loadDiagnoses();
    this.loadEnvironments();
    this.load();
  }

  async loadDiagnoses() {
    try {
      const r = await this.ctx.api.get('/api/diagnoses');
      const cur = this.state.diagnosis || '';
      clear(this.diagSel).append(h('option', {value: ''}, 'None'));
      let found = false;
      for (const d of r.diagnoses || []) {
        found = found || d.id === cur;
        const label = `${fmt.method(d.method).short} · ${d.state} · ${d.id.slice(0, 8)}`;
        this.diagSel.append(h('option', {value: d.id, selected: d.id === cur, title: d.method}, label));
      }
      if (cur && !found) this.diagSel.append(h('option', {value: cur, selected: true}, cur));
    } catch {
      /* the list stays as it is: the id from the URL, if any */
    }
  }

  async loadEnvironments() {
    const sel = this.envSel;  // a later buildForm makes another one: what this call awaited is then not for it
    try {
      const r = await this.ctx.api.get('/api/environments');
      if (sel !== this.envSel) return;
      const cur = this.state.env || '';
      clear(sel).append(h('option', {value: ''}, 'Any'));
      let found = false;
      for (const e of r.environments || []) {
        found = found || e.id === cur;
        const label = e.name && e.name !== e.id ? `${e.id} — ${e.name}` : e.id;
        sel.append(h('option', {value: e.id, selected: e.id === cur}, label));
      }
      if (cur && !found) sel.append(h('option', {value: cur, selected: true}, cur));
    } catch {
      /* the list stays as it is: the id from the URL, if any */
    }
  }

  // ---- loading ----

  async load() {
    if (this.abort) this.abort.abort();
    const abort = new AbortController();
    this.abort = abort;
    this.showMessage('loading', 'Loading traces…');
    this.countsEl.textContent = '';
    try {
      const list = this.state.diagnosis ? await this.fetchReport(abort.signal) : await this.fetchTraces(abort.signal);
      if (abort.signal.aborted) return;
      this.setData(list);
    } catch (e) {
      if (e.name === 'AbortError') return;
      this.setData([]);
      this.countsEl.textContent = '';
      this.showMessage('error', `Could not load traces: ${e.message}`);
    }
  }

  async fetchTraces(signal) {
    const s = this.state;
    const q = {limit: s.limit || 1000, slowest: s.slowest};
    for (const k of FILTERS)
      if (k !== 'diagnosis') q[k] = s[k];
    const r = await this.ctx.api.get('/api/traces', q, {signal});
    this.reportNote = '';
    this.unreachable = unreachableNote(r);
    return r.traces || [];
  }

  // A diagnosis' report: HTTP globs go to the server, the other filters apply here.
  async fetchReport(signal) {
    const s = this.state;
    const q = {limit: s.limit || 1000, http_method: s.http_method, http_path: s.http_path, http_status: s.http_status};
    const r = await this.ctx.api.get(`/api/diagnoses/${encodeURIComponent(s.diagnosis)}/report`, q, {signal});
    this.unreachable = null;
    let list = r.traces || [];
    const from = parseTimeMs(s.from);
    const to = parseTimeMs(s.to);
    const min = parseDurationNs(s.min_duration);
    const root = (s.root || '').toLowerCase();
    const agent = (s.agent || '').toLowerCase();
    list = list.filter(
        (t) => (from === null || t.start_ns / 1e6 >= from) && (to === null || t.start_ns / 1e6 <= to) &&
            (min === null || t.duration_ns >= min) && (!root || (t.root_method || '').toLowerCase().includes(root)) &&
            (!agent || (t.root_jvm || '').toLowerCase().includes(agent)),
    );
    if (s.slowest === '1') list.sort((a, b) => b.duration_ns - a.duration_ns);
    const unused = [s.contains && '"contains"', s.env && '"environment"'].filter(Boolean);
    this.reportNote = `diagnosis ${s.diagnosis.slice(0, 8)}: ${fmt.count(r.found)} tagged${
        unused.length ? `; ${unused.join(' and ')} ${unused.length > 1 ? 'do' : 'does'} not apply to a report` : ''}`;
    return list;
  }

  setData(list) {
    this.all = list;
    const {rank, groups} = rankDurations(list);
    list.forEach((t, i) => (t._rank = rank[i]));
    this.groups = groups;
    this.selected = new Set([...this.selected].filter((id) => list.some((t) => t.trace_id === id)));
    this.applySort();
    this.renderCounts();
    this.renderChart();
    this.renderList();
    this.updateFlameButton();
    if (!list.length)
      this.showMessage('empty', this.emptyText());
    else
      this.showMessage(null);
  }

  emptyText() {
    const filtered = FILTERS.some((k) => this.state[k] && k !== 'diagnosis');
    if (this.state.diagnosis) return 'This diagnosis tagged no traces that match.';
    return filtered ? 'No trace matches these filters. Widen the time range or clear a filter.' :
                      'No traces stored yet.';
  }

  renderCounts() {
    const n = this.all.length;
    const limit = Number(this.state.limit || 1000);
    const more = n >= limit ? ` (the limit: there may be more)` : '';
    const text = `${fmt.count(n)} trace${n === 1 ? '' : 's'}, ${fmt.count(this.groups)} entry point${
        this.groups === 1 ? '' : 's'}${more}`;
    this.countsEl.textContent = this.reportNote ? `${text} · ${this.reportNote}` : text;
    clear(this.partialBox);
    if (this.unreachable) this.partialBox.append(this.unreachable);
  }

  showMessage(kind, text) {
    clear(this.listMsg);
    this.listMsg.hidden = !kind;
    if (kind) this.listMsg.append(notice(kind, text));
    this.listBox.hidden = kind === 'loading' || kind === 'error' || (kind === 'empty' && !this.all.length);
  }

  // ---- sorting ----

  applySort() {
    const sort = this.state.sort || '';
    const rows = this.all.slice();
    const key = sort.replace(/^-/, '');
    const dir = sort.startsWith('-') ? -1 : 1;
    if (key === 'duration')
      rows.sort((a, b) => dir * (a.duration_ns - b.duration_ns));
    else if (key === 'start')
      rows.sort((a, b) => dir * (a.start_ns - b.start_ns));
    this.rows = rows;
  }

  // Clicking a header: descending first, then ascending, then the server's order.
  toggleSort(key) {
    const cur = this.state.sort || '';
    const next = cur === `-${key}` ? key : cur === key ? '' : `-${key}`;
    this.state = {...this.state, sort: next || undefined};
    this.ctx.setQuery(this.state);
    this.applySort();
    this.updateSortHeaders();
    this.listBox.scrollTop = 0;
    if (this.list) this.list.refresh();
  }

  // ---- the scatter chart ----

  toggleLog() {
    this.state = {...this.state, log: this.logInput.checked ? '1' : undefined};
    this.ctx.setQuery(this.state);
    this.renderChart();
  }

  renderChart() {
    if (this.chart) this.chart.destroy();
    this.chart = null;
    clear(this.chartBox);
    if (!this.all.length) {
      this.chartPanel.hidden = true;
      return;
    }
    this.chartPanel.hidden = false;
    const pts = this.all.slice().sort((a, b) => a.start_ns - b.start_ns);
    this.chartPts = pts;
    const xs = pts.map((t) => t.start_ns / 1e9);
    const ys = pts.map((t) => Math.max(t.duration_ns / 1e6, 0.001));
    const opts = this.chartOptions(xs, ys);
    this.chart = new uPlot(opts, [xs, ys], this.chartBox);
    this.chart.over.addEventListener('mousemove', (ev) => this.onChartHover(ev));
    this.chart.over.addEventListener('mouseleave', () => this.tip.hide());
    this.chart.over.addEventListener('mousedown', (ev) => (this.downAt = [ev.clientX, ev.clientY]));
    this.chart.over.addEventListener('click', (ev) => this.onChartClick(ev));
    if (!this.chartResize) {
      this.chartResize = new ResizeObserver(() => {
        if (this.chart && this.chartBox.clientWidth)
          this.chart.setSize({width: this.chartBox.clientWidth, height: 190});
      });
      this.chartResize.observe(this.chartBox);
    }
  }

  chartOptions(xs, ys) {
    const log = this.state.log === '1';
    let span = xs.length ? xs[xs.length - 1] - xs[0] : 0;
    const pad = Math.max(span * 0.02, 0.5);
    span = [xs[0] - pad, xs[xs.length - 1] + pad];
    const ymax = Math.max(...ys);
    return {
      width: Math.max(300, this.chartBox.clientWidth || 1000),
      height: 190,
      legend: {show: false},
      cursor: {drag: {x: true, y: true, uni: 24, setScale: false}, points: {show: false}, y: false},
      select: {show: true},
      scales: {
        x: {time: true, range: () => span},
        y: log ? {distr: 3, log: 10, range: (u, mn, mx) => [Math.max(0.001, Math.min(...ys) / 1.5), mx * 1.5]} :
                 {range: () => [0, ymax * 1.08]},
      },
      axes: [
        {stroke: '#667085', grid: {stroke: '#eef0f3'}, ticks: {stroke: '#e3e6eb'}},
        {
          stroke: '#667085',
          grid: {stroke: '#eef0f3'},
          ticks: {stroke: '#e3e6eb'},
          // wide enough for the longest label ("200.0 ms", "1.25 s")
          size: (u, values) => 16 + 7.5 * Math.max(6, ...(values || []).map((v) => String(v).length)),
          values: (u, vals) => vals.map((v) => fmt.ms(v))
        },
      ],
      series: [{}, {label: 'duration', stroke: 'transparent', paths: () => null, points: {show: false}}],
      hooks: {
        draw: [(u) => this.drawDots(u)],
        setSelect: [(u) => this.onBrush(u)],
      },
    };
  }

  // One dot per trace, coloured by its percentile class.
  drawDots(u) {
    const ctx = u.ctx;
    const {left, top, width, height} = u.bbox;
    const [xs, ys] = u.data;
    const r = Math.max(1.5, Math.round(2 * devicePixelRatio));
    const colors = {fast: '#22a06b', mid: '#e2a400', slow: '#d93025', few: '#7b8494'};
    ctx.save();
    ctx.beginPath();
    ctx.rect(left, top, width, height);
    ctx.clip();
    ctx.globalAlpha = xs.length > 5000 ? 0.5 : 0.8;
    for (const cls of ['few', 'fast', 'mid', 'slow']) {
      ctx.fillStyle = colors[cls];
      for (let i = 0; i < xs.length; i++) {
        if (this.chartPts[i]._rank !== cls) continue;
        const x = u.valToPos(xs[i], 'x', true);
        const y = u.valToPos(ys[i], 'y', true);
        ctx.fillRect(x - r, y - r, 2 * r, 2 * r);
      }
    }
    ctx.restore();
  }

  // The index of the dot nearest to the mouse (within 8 px), or -1.
  dotAt(ev) {
    const u = this.chart;
    const rect = u.over.getBoundingClientRect();
    const mx = ev.clientX - rect.left;
    const my = ev.clientY - rect.top;
    const [xs, ys] = u.data;
    let best = -1;
    let bestD = 64;
    const lo = u.posToVal(mx - 8, 'x');
    let i = lowerBound(xs, lo);
    for (; i < xs.length; i++) {
      const x = u.valToPos(xs[i], 'x');
      if (x > mx + 8) break;
      const y = u.valToPos(ys[i], 'y');
      const d = (x - mx) ** 2 + (y - my) ** 2;
      if (d < bestD) {
        bestD = d;
        best = i;
      }
    }
    return best;
  }

  onChartHover(ev) {
    const i = this.dotAt(ev);
    if (i < 0) {
      this.tip.hide();
      this.chart.over.style.cursor = 'crosshair';
      return;
    }
    const t = this.chartPts[i];
    this.chart.over.style.cursor = 'pointer';
    this.tip.show(ev, [
      entryLabel(t), ['start', fmt.time(t.start_ns)], ['duration', fmt.ns(t.duration_ns)], ['JVM', t.root_jvm || '—'],
      RANK_TEXT[t._rank]
    ]);
  }

  onChartClick(ev) {
    if (this.downAt && Math.abs(ev.clientX - this.downAt[0]) + Math.abs(ev.clientY - this.downAt[1]) > 4) return;
    const i = this.dotAt(ev);
    if (i >= 0) this.ctx.navigate(`#/trace/${this.chartPts[i].trace_id}`);
  }

  // A brush: the time range (and, when dragged vertically too, the minimum duration).
  onBrush(u) {
    const s = u.select;
    if (s.width < 4) return;
    const from = u.posToVal(s.left, 'x');
    const to = u.posToVal(s.left + s.width, 'x');
    const next = {...this.state, from: new Date(from * 1000).toISOString(), to: new Date(to * 1000).toISOString()};
    const plotH = u.over.clientHeight;
    if (s.height < plotH - 2) next.min_duration = durationParam(u.posToVal(s.top + s.height, 'y') * 1e6);
    u.setSelect({left: 0, top: 0, width: 0, height: 0}, false);
    this.state = next;
    this.ctx.setQuery(next);
    const form = this.buildForm();
    this.form.replaceWith(form);
    this.form = form;
    this.loadDiagnoses();
    this.loadEnvironments();
    this.load();
  }

  // ---- the list ----

  renderList() {
    if (this.list) {
      this.listBox.scrollTop = 0;
      this.list.setCount(this.rows.length);
      return;
    }
    this.header = this.buildHeader();
    this.list = new VirtualList(this.listBox, {
      rowHeight: ROW_HEIGHT,
      count: this.rows.length,
      header: this.header,
      create: () => this.createRow(),
      render: (el, i) => this.renderRow(el, this.rows[i]),
    });
    this.listBox.addEventListener('click', (ev) => this.onListClick(ev));
  }

  buildHeader() {
    this.allBox =
        h('input', {type: 'checkbox', title: `check the first ${MAX_FLAME} rows`, onchange: () => this.onAllBox()});
    const sortable = (key, text, cls) =>
        h('button',
          {type: 'button', class: `tl-sort ${cls}`, dataset: {key}, onclick: () => this.toggleSort(key), title: 'sort'},
          text, h('span', {class: 'tl-arrow'}));
    const head = h(
        'div',
        {class: 'tl-row tl-head'},
        h('span', {class: 'tl-c-check'}, this.allBox),
        sortable('start', 'Start', 'tl-c-start'),
        h('span', {class: 'tl-c-entry'}, 'Entry point'),
        sortable('duration', 'Duration', 'tl-c-dur num'),
        h('span', {class: 'tl-c-jvm'}, 'JVMs'),
        h('span', {class: 'tl-c-num num', title: 'segments: a thread\'s part of the trace'}, 'Segs'),
        h('span', {class: 'tl-c-num num'}, 'Events'),
        h('span', {class: 'tl-c-num num', title: 'events the agents dropped'}, 'Drop'),
        h('span', {class: 'tl-c-state'}, 'State'),
        h('span', {class: 'tl-c-diag'}, 'Diagnoses'),
    );
    this.sortButtons = [...head.querySelectorAll('.tl-sort')];
    this.updateSortHeaders();
    return head;
  }

  updateSortHeaders() {
    const sort = this.state.sort || '';
    for (const b of this.sortButtons || []) {
      const k = b.dataset.key;
      const arrow = b.querySelector('.tl-arrow');
      arrow.textContent = sort === k ? ' ▲' : sort === `-${k}` ? ' ▼' : '';
      b.classList.toggle('active', sort.replace('-', '') === k);
    }
  }

  createRow() {
    const c = (cls, tag = 'span') => h(tag, {class: cls});
    const row = h('div', {class: 'tl-row'});
    row.cells = {
      check: h('input', {type: 'checkbox', class: 'tl-rowcheck', tabindex: -1}),
      start: c('tl-c-start mono'),
      entry: h('a', {class: 'tl-c-entry'}),
      dur: c('tl-c-dur num mono'),
      jvm: c('tl-c-jvm'),
      segs: c('tl-c-num num'),
      events: c('tl-c-num num'),
      dropped: c('tl-c-num num'),
      state: c('tl-c-state'),
      diag: c('tl-c-diag'),
    };
    const cs = row.cells;
    row.append(
        h('span', {class: 'tl-c-check'}, cs.check), cs.start, cs.entry, cs.dur, cs.jvm, cs.segs, cs.events, cs.dropped,
        cs.state, cs.diag);
    return row;
  }

  renderRow(row, t) {
    const c = row.cells;
    row.dataset.id = t.trace_id;
    row.classList.toggle('selected', this.selected.has(t.trace_id));
    c.check.checked = this.selected.has(t.trace_id);
    c.start.textContent = fmt.time(t.start_ns);
    this.renderEntry(c.entry, t);
    c.dur.textContent = fmt.ns(t.duration_ns);
    c.dur.className = `tl-c-dur num mono rank-${t._rank}`;
    c.dur.title = `${fmt.ns(t.duration_ns)}: ${RANK_TEXT[t._rank]}`;
    c.jvm.textContent = jvmName(t.root_jvm) + (t.jvms > 1 ? ` +${t.jvms - 1}` : '');
    c.jvm.title = `${t.jvms} JVM${t.jvms === 1 ? '' : 's'}; root: ${t.root_jvm || 'unknown'}`;
    c.segs.textContent = fmt.count(t.segments);
    c.events.textContent = fmt.count(t.events);
    c.dropped.textContent = t.dropped ? fmt.count(t.dropped) : '0';
    c.dropped.classList.toggle('tl-dropped', t.dropped > 0);
    append(clear(c.state), [
      completenessBadge(t),
      t.remote_root ?
          h('span', {class: 'badge info', title: 'the trace started in a caller that is not instrumented'}, 'remote') :
          null,
      truncatedBadge(t),
      t.root_lost ?
          h('span',
            {class: 'badge warn', title: 'the root segment arrived without its root call (its first batch was lost)'},
            'root lost') :
          null,
    ]);
    append(
        clear(c.diag),
        (t.diagnoses || [
        ]).map((d) => h('a', {class: 'badge info', href: `#/diagnoses/${d}`, title: `diagnosis ${d}`}, d.slice(0, 8))));
  }

  renderEntry(a, t) {
    const m = fmt.method(t.root_method);
    a.href = `#/trace/${t.trace_id}`;
    a.title = t.root_method || '';
    clear(a);
    const http = t.http;
    if (http && (http.method || http.path)) {
      a.append(h('span', {class: 'tl-http'}, `${http.method || ''} ${http.path || ''}`.trim()));
      if (http.status !== null && http.status !== undefined)
        a.append(h('span', {class: `tl-status s${String(http.status)[0]}`}, String(http.status)));
      a.append(h('span', {class: 'tl-meth muted'}, m.short));
    } else {
      a.append(
          h('span', {class: 'tl-meth-main'}, m.short || missingRoot(t)), h('span', {class: 'tl-cls muted'}, m.cls));
    }
  }

  onListClick(ev) {
    const row = ev.target.closest('.tl-row');
    if (!row || row.classList.contains('tl-head') || !row.dataset.id) return;
    if (ev.target.closest('a')) return;
    const id = row.dataset.id;
    if (ev.target.closest('.tl-c-check')) {
      if (ev.target.tagName !== 'INPUT') row.cells.check.checked = !row.cells.check.checked;
      this.setSelected(id, row.cells.check.checked);
      row.classList.toggle('selected', row.cells.check.checked);
      return;
    }
    this.ctx.navigate(`#/trace/${id}`);
  }

  // ---- selection and the merged flame graph ----

  setSelected(id, on) {
    if (on && this.selected.size >= MAX_FLAME && !this.selected.has(id)) {
      this.ctx.toast(`At most ${MAX_FLAME} traces in one flame graph.`, 'error');
      this.list.refresh();
      return;
    }
    if (on)
      this.selected.add(id);
    else
      this.selected.delete(id);
    this.updateFlameButton();
  }

  selectFirst(n) {
    this.selected = new Set(this.rows.slice(0, n).map((t) => t.trace_id));
    this.updateFlameButton();
    if (this.list) this.list.refresh();
  }

  clearSelection() {
    this.selected.clear();
    this.updateFlameButton();
    if (this.list) this.list.refresh();
  }

  onAllBox() {
    if (this.allBox.checked)
      this.selectFirst(MAX_FLAME);
    else
      this.clearSelection();
  }

  updateFlameButton() {
    const n = this.selected.size;
    this.flameBtn.disabled = n === 0;
    this.flameBtn.textContent = `Flame graph of ${fmt.count(n)} trace${n === 1 ? '' : 's'}`;
    if (this.allBox) this.allBox.checked = n > 0 && n >= Math.min(MAX_FLAME, this.rows.length);
  }

  openFlame() {
    const ids = this.rows.filter((t) => this.selected.has(t.trace_id)).map((t) => t.trace_id);
    if (ids.length) this.ctx.navigate(`#/flame?ids=${ids.join(',')}`);
  }
}

function entryLabel(t) {
  const http = t.http && (t.http.method || t.http.path) ?
      `${t.http.method || ''} ${t.http.path || ''} ${t.http.status ?? ''}`.trim() :
      '';
  return http ? `${http} · ${fmt.method(t.root_method).short}` : t.root_method || missingRoot(t);
}

// What stands for the entry point of a trace whose root call is not known: its root
// segment lost its first batch, has not arrived yet, or never did.
function missingRoot(t) {
  if (t.root_lost) return '(root call lost)';
  return completeness(t) === 'arriving' ? '(root not arrived yet)' : '(root missing)';
}

function lowerBound(arr, v) {
  let lo = 0;
  let hi = arr.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (arr[mid] < v)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}
