// views/metrics.js - '#/metrics': the transactions or methods of an environment ranked by a
// statistic over a time window (GET /api/metrics/top), and for the selected one its latency
// and throughput over time (series), the threshold rules that find it abnormal (alerts, as
// shaded bands and a list), and its per-JVM breakdown (jvms). Calls running past the stall
// threshold right now are listed when there are any (stalled).
//
// Hash query (the state): env, kind (transaction|method), last (15m..7d) or from/to (ms),
// stat, sel (the selected series' 16-hex subject), sort/dir (client-side sort of the table),
// q (a name filter).
import {clear, h, notice} from '../lib/dom.js';
import {ago, count, method as splitMethod, ms, time} from '../lib/format.js';
import {unreachableNote} from '../lib/loss.js';
import {timeChart} from '../lib/m-chart.js';
import {errorText, field, methodName, msCell, pct, rateCell, replace, select, sortTable, windowQuery} from '../lib/m-common.js';

const WINDOWS = [
  ['15m', 'Last 15 minutes'], ['1h', 'Last hour'], ['6h', 'Last 6 hours'], ['24h', 'Last 24 hours'],
  ['7d', 'Last 7 days'], ['custom', 'Custom range…']
];
const STATS = ['p50', 'p90', 'p95', 'p99', 'p99.9', 'max', 'mean', 'error_rate', 'stalled', 'count'];
const COLORS = {
  p50: '#2563eb',
  p95: '#f59e0b',
  p99: '#dc2626',
  max: '#7c3aed',
  rate: '#0ea5e9',
  errors: '#dc2626'
};

let S = null;  // the mounted view's state

export default {
  route: 'metrics',
  title: 'Metrics',
  nav: true,
  mount(el, params, ctx) {
    S = initialState(el, params.query, ctx);
    renderFrame();
    loadEnvironments();
    loadAll();
  },
  unmount() {
    if (!S) return;
    clearTimeout(filterTimer);
    destroyCharts();
    S.gen = -1;
    S = null;
  },
};

function initialState(el, q, ctx) {
  const win = windowQuery(q, '1h');
  return {
    el,
    ctx,
    gen: ++mounts * 1e6,  // a result of an earlier mount never matches a later one
    env: q.get('env') || '',
    kind: q.get('kind') === 'method' ? 'method' : 'transaction',
    last: win.last || '',
    from: win.from || '',
    to: win.to || '',
    stat: q.get('stat') || 'p99',
    sel: q.get('sel') || '',
    sort: q.get('sort') ? {key: q.get('sort'), dir: q.get('dir') === 'asc' ? 'asc' : 'desc'} : null,
    filter: q.get('q') || '',
    envs: [],
    top: null,
    alerts: [],
    charts: [],
    parts: {},
  };
}

function saveQuery() {
  S.ctx.setQuery({
    env: S.env,
    kind: S.kind,
    last: S.from ? '' : S.last,
    from: S.from,
    to: S.from ? S.to : '',
    stat: S.stat,
    sel: S.sel,
    sort: S.sort ? S.sort.key : '',
    dir: S.sort ? S.sort.dir : '',
    q: S.filter,
  });
}

function windowParams() {
  return S.from ? {from: S.from, to: S.to || undefined} : {last: S.last || '1h'};
}

// ---- layout ----

function renderFrame() {
  const p = S.parts;
  p.toolbar = h('div', {class: 'm-toolbar'});
  p.alerts = h('div', {class: 'mx-alerts'});
  p.top = h('div', {class: 'panel mx-top'});
  p.detail = h('div', {class: 'mx-detail'});
  p.stalled = h('div', {class: 'mx-stalled'});
  clear(S.el).append(
      h('div', {class: 'm-head'}, h('h1', null, 'Metrics'),
        h('span', {class: 'muted m-sub'}, 'latency percentiles from merged histograms, per environment')),
      p.toolbar,
      p.alerts,
      p.top,
      p.detail,
      p.stalled,
  );
  renderToolbar();
}

function renderToolbar() {
  const envOptions = [
    ['', 'All environments'], ...S.envs.map((e) => [e.id, e.name && e.name !== e.id ? `${e.id} — ${e.name}` : e.id])
  ];
  if (S.env && !S.envs.some((e) => e.id === S.env)) envOptions.push([S.env, S.env]);
  const winValue = S.from ? 'custom' : S.last;
  replace(
      S.parts.toolbar,
      field('Environment', select(envOptions, S.env, (v) => change({env: v, sel: ''}))),
      field('Kind', kindSwitch()),
      field('Window', select(WINDOWS, winValue, onWindow)),
      S.from ? customRange() : null,
      field(
          'Rank by', select(STATS.map((s) => [s, s]), S.stat, (v) => change({stat: v})),
          'the statistic the server ranks by'),
      field('Filter', h('input', {
              type: 'search',
              placeholder: 'name contains…',
              value: S.filter,
              oninput: (e) => onFilter(e.target.value)
            })),
      h('div', {class: 'm-grow'}),
      h('button', {type: 'button', onclick: () => loadAll(), title: 'Load again'}, '↻ Refresh'),
  );
}

function kindSwitch() {
  const btn = (k, text) =>
      h('button', {
        type: 'button',
        class: S.kind === k ? 'm-on' : '',
        'aria-pressed': S.kind === k ? 'true' : 'false',
        onclick: () => change({kind: k, sel: ''})
      },
        text);
  return h('div', {class: 'm-seg'}, btn('transaction', 'Transactions'), btn('method', 'Methods'));
}

function customRange() {
  const input = (v, key) => h('input', {
    type: 'datetime-local',
    step: '1',
    value: toLocalInput(v),
    onchange: (e) => change({[key]: String(new Date(e.target.value).getTime() || '')})
  });
  return h(
      'div', {class: 'm-range'}, field('From', input(S.from, 'from')), field('To', input(S.to || Date.now(), 'to')));
}

function toLocalInput(msv) {
  const d = new Date(Number(msv));
  if (Number.isNaN(d.getTime())) return '';
  const pad = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}:${
      pad(d.getSeconds())}`;
}

function onWindow(v) {
  if (v === 'custom') {
    const to = Date.now();
    const span = {'15m': 9e5, '1h': 36e5, '6h': 216e5, '24h': 864e5, '7d': 6048e5}[S.last] || 36e5;
    change({from: String(to - span), to: String(to)});
  } else
    change({last: v, from: '', to: ''});
}

let filterTimer = null;
let mounts = 0;
function onFilter(v) {
  clearTimeout(filterTimer);
  filterTimer = setTimeout(() => {
    if (!S) return;
    S.filter = v;
    saveQuery();
    renderTop();
  }, 150);
}

function change(patch) {
  Object.assign(S, patch);
  saveQuery();
  renderToolbar();
  loadAll();
}

// ---- loading ----

async function loadEnvironments() {
  try {
    const r = await S.ctx.api.get('/api/environments');
    if (!S) return;
    S.envs = r.environments || [];
    mergeDataEnvs();
    renderToolbar();
  } catch (e) {
    console.warn('environments', e);
  }
}

// Environments the data has but the configuration no longer lists.
function mergeDataEnvs() {
  const known = new Set(S.envs.map((e) => e.id));
  for (const it of (S.top && S.top.items) || [])
    if (it.env && !known.has(it.env)) {
      known.add(it.env);
      S.envs.push({id: it.env, name: `${it.env} (data only)`});
    }
}

async function loadAll() {
  const gen = ++S.gen;
  replace(S.parts.top, notice('loading', 'Loading…'));
  const base = {env: S.env || undefined, ...windowParams()};
  const [top, alerts, stalled] = await Promise.allSettled([
    S.ctx.api.get('/api/metrics/top', {...base, kind: S.kind, stat: S.stat, limit: 200}),
    S.ctx.api.get('/api/metrics/alerts', base),
    S.ctx.api.get('/api/metrics/stalled', base),
  ]);
  if (!S || gen !== S.gen) return;
  S.alerts = alerts.status === 'fulfilled' ? alerts.value.abnormal || [] : [];
  // an answer that lacks partitions of ingest workers that did not answer says so
  S.unreachable = [top, alerts, stalled].map((r) => r.status === 'fulfilled' && unreachableNote(r.value)).find(Boolean);
  if (top.status === 'rejected') {
    replace(S.parts.top, notice('error', `Could not load the ranking: ${errorText(top.reason)}`));
    replace(S.parts.detail);
  } else {
    S.top = top.value;
    mergeDataEnvs();
    renderToolbar();
    renderTop();
    renderDetail();
  }
  renderAlerts();
  renderStalled(stalled.status === 'fulfilled' ? stalled.value.stalled || [] : []);
}

// ---- the ranking ----

function visibleItems() {
  const items = (S.top && S.top.items) || [];
  const f = S.filter.trim().toLowerCase();
  return f ? items.filter((it) => it.name.toLowerCase().includes(f)) : items;
}

function renderTop() {
  const items = visibleItems();
  const all = (S.top && S.top.items) || [];
  const head = h(
      'div',
      {class: 'm-panel-head'},
      h('h2', null, S.kind === 'transaction' ? 'Transactions' : 'Methods'),
      h('span', {class: 'muted'},
        `${items.length}${items.length !== all.length ? ` of ${all.length}` : ''} ranked by ${S.top.stat || S.stat} · ${
            time(S.top.from_ms)} – ${time(S.top.to_ms)}`),
  );
  const t = sortTable({
    columns: topColumns(),
    rows: items,
    sort: S.sort,
    onSort: (key, dir) => {
      S.sort = {key, dir};
      saveQuery();
      renderTop();
    },
    rowAttrs: (it) => ({
      class: `m-click${it.subject === S.sel ? ' m-selected' : ''}`,
      onclick: (e) => {
        if (e.target.closest('a')) return;
        selectRow(it.subject);
      },
    }),
    empty: all.length ?
        'No name matches the filter.' :
        `No ${
            S.kind === 'transaction' ? 'transactions' :
                                       'methods'} recorded in this window. Try a longer window or another environment.`,
  });
  replace(S.parts.top, head, S.unreachable || null, h('div', {class: 'm-scroll'}, t));
}

function topColumns() {
  const num = (key, title, get, fmt, hint) => ({key, title, class: 'num', sort: get, get: (r) => fmt(get(r)), hint});
  const cols = [
    {key: 'name', title: 'Name', sort: (r) => r.name, get: (r) => subjectName(r, {withPackage: true})},
  ];
  if (!S.env) cols.push({key: 'env', title: 'Env', sort: (r) => r.env, get: (r) => r.env});
  cols.push(
      num('count', 'Count', (r) => r.count, count),
      {key: 'rate', title: 'Rate/s', class: 'num', sort: (r) => r.rate, get: rateCell},
      {key: 'errors', title: 'Errors', class: 'num', sort: (r) => r.errors, get: errorsCell},
      num('p50', 'p50', (r) => r.p50_ms, msCell),
      num('p90', 'p90', (r) => r.p90_ms, msCell),
      num('p95', 'p95', (r) => r.p95_ms, msCell),
      num('p99', 'p99', (r) => r.p99_ms, msCell),
      num('max', 'Max', (r) => r.max_ms, msCell),
      {
        key: 'stalled',
        title: 'Stalled',
        class: 'num',
        sort: (r) => r.stalled,
        get: (r) => (r.stalled ? h('span', {class: 'm-bad'}, count(r.stalled)) : '0')
      },
      num('inflight', 'In flight', (r) => r.max_in_flight, count, 'most calls in flight at once'),
      {
        key: 'slowest',
        title: 'Slowest',
        get: (r) =>
            (r.slowest_trace ?
                 h('a', {href: `#/trace/${r.slowest_trace}`, title: `the slowest call's trace ${r.slowest_trace}`},
                   'trace ↗') :
                 '—')
      },
  );
  return cols;
}

function errorsCell(r) {
  if (!r.errors) return h('span', {class: 'muted'}, '0');
  return h(
      'span', {class: 'm-bad', title: `${pct(r.error_rate, 2)} of calls`}, `${count(r.errors)} · ${pct(r.error_rate)}`);
}

function selectRow(subject) {
  S.sel = S.sel === subject ? '' : subject;
  saveQuery();
  renderTop();
  renderDetail();
  if (S.sel) S.parts.detail.scrollIntoView({behavior: 'smooth', block: 'nearest'});
}

// ---- abnormal now ----

function renderAlerts() {
  if (!S.alerts.length) return replace(S.parts.alerts);
  replace(
      S.parts.alerts,
      h(
          'div',
          {class: 'mx-alert-strip', role: 'status'},
          h('strong', null, `⚠ ${S.alerts.length} abnormal now`),
          S.alerts.map(
              (a) => h(
                  'span',
                  {class: 'mx-alert-chip', title: `${a.name}\nrule ${a.rule} (${a.env}) since ${time(a.since_ms)}`},
                  h('span', {class: 'badge bad'}, a.rule),
                  ' ',
                  subjectName(a),
                  h('span', {class: 'muted'}, ` since ${ago(a.since_ms)}`),
                  ),
              ),
          ),
  );
}

// ---- the selected series ----

function destroyCharts() {
  for (const c of S.charts) c.destroy();
  S.charts = [];
}

async function renderDetail() {
  destroyCharts();
  const it = S.sel && S.top && (S.top.items || []).find((x) => x.subject === S.sel);
  if (!it) {
    replace(
        S.parts.detail,
        S.top && (S.top.items || []).length ?
            h('div', {class: 'muted m-hint'}, 'Select a row to see it over time, its JVMs and its threshold events.') :
            null);
    return;
  }
  const gen = S.gen;
  const box = h('div', {class: 'mx-charts'}, notice('loading', 'Loading series…'));
  const jvms = h('div', null);
  replace(S.parts.detail, h('div', {class: 'panel'}, detailHead(it), kpis(it), box, seriesAlerts(it), jvms));
  const q = {env: it.env, kind: S.kind, name: it.subject, ...windowParams()};
  const [series, perJvm] =
      await Promise.allSettled([S.ctx.api.get('/api/metrics/series', q), S.ctx.api.get('/api/metrics/jvms', q)]);
  if (!S || gen !== S.gen || S.sel !== it.subject) return;
  renderCharts(box, series, it);
  renderJvms(jvms, perJvm);
}

function detailHead(it) {
  return h(
      'div',
      {class: 'mx-detail-head'},
      h(
          'div',
          {class: 'mx-title'},
          h('span', {class: 'badge info'}, S.kind),
          h('code', {class: 'mx-fullname', title: it.name}, it.name),
          h('span', {class: 'muted'}, `${it.env} · ${it.subject}`),
          it.root_method ? h('span', {class: 'muted'}, ' · root method ', methodName(it.root_method)) : null,
          ),
      h(
          'div',
          {class: 'mx-actions'},
          h('a', {class: 'button', href: tracesHref(it)},
            S.kind === 'transaction' ? 'Traces of this' : 'Traces containing this'),
          it.slowest_trace ? h('a', {class: 'button', href: `#/trace/${it.slowest_trace}`}, 'Slowest trace') : null,
          h('a',
            {class: 'button primary', href: diagnoseHref(it), title: 'Discover and instrument its callees for a while'},
            'Diagnose…'),
          h('button', {type: 'button', class: 'm-close', title: 'Close', onclick: () => selectRow(it.subject)}, '×'),
          ),
  );
}

function tracesHref(it) {
  const qs = new URLSearchParams();
  const route = S.kind === 'transaction' && routeOf(it);
  if (route) {  // the traces of its requests: method and path (the route as a glob)
    if (route.method !== '_OTHER') qs.set('http_method', route.method);
    qs.set('http_path', route.path);
    if (it.env) qs.set('env', it.env);
  } else {
    qs.set(S.kind === 'transaction' ? 'root' : 'contains', it.name);
  }
  if (S.top) {
    qs.set('from', String(S.top.from_ms));
    qs.set('to', String(S.top.to_ms));
  }
  return `#/traces?${qs}`;
}

function diagnoseHref(it) {
  return `#/diagnoses/new?${new URLSearchParams({method: it.root_method || it.name, environment: it.env})}`;
}

// A transaction the agent named by its request ("GET /orders/*") carries the root method it
// came with (root_method); any other subject is a method.
function routeOf(it) {
  const m = it.root_method && /^(\S+) (\/.*)$/.exec(it.name || '');
  return m ? {method: m[1], path: m[2]} : null;
}

function subjectName(it, opts) {
  if (!routeOf(it)) return methodName(it.name, opts);
  return h('span', {class: 'm-method', title: `${it.name}\nroot method ${it.root_method}`}, it.name);
}

function kpis(it) {
  const tile = (label, value, cls = '') =>
      h('div', {class: `m-kpi ${cls}`}, h('div', {class: 'm-kpi-v'}, value), h('div', {class: 'm-kpi-l'}, label));
  return h(
      'div',
      {class: 'm-kpis'},
      tile('calls', count(it.count)),
      tile('per second', rateCell(it)),
      tile('errors', it.errors ? `${count(it.errors)} (${pct(it.error_rate)})` : '0', it.errors ? 'bad' : ''),
      tile('p50', ms(it.p50_ms)),
      tile('p95', ms(it.p95_ms)),
      tile('p99', ms(it.p99_ms), 'strong'),
      tile('max', ms(it.max_ms)),
      tile('mean', ms(it.mean_ms)),
      tile('stalled', count(it.stalled), it.stalled ? 'bad' : ''),
      tile('most in flight', count(it.max_in_flight)),
  );
}

function renderCharts(box, res, it) {
  if (res.status === 'rejected')
    return replace(box, notice('error', `Could not load the series: ${errorText(res.reason)}`));
  const s = res.value;
  const pts = s.points || [];
  if (!pts.length) return replace(box, notice('empty', 'No points in this window.'));
  const bands = alertsOf(it).map((a) => ({from: a.since_ms, to: s.to_ms, label: `${a.rule} abnormal`}));
  const xs = pts.map((p) => p.t);
  const lat = h('div', {class: 'mx-chart'});
  const thr = h('div', {class: 'mx-chart'});
  const resTxt = `${Math.round(s.res_ms / 1000)} s buckets`;
  // a bucket still open, or closed less than an agent's metric interval (10 s) ago, holds
  // some of its intervals only: its rate would read as a drop
  const now = Date.now();
  const closed = (p) => p.t + s.res_ms + 10000 <= now;
  const open = pts.some((p) => !closed(p));
  replace(
      box,
      h('div', {class: 'mx-chart-box'},
        h('div', {class: 'mx-chart-title'}, 'Latency',
          h('span', {class: 'muted'}, ` · ${resTxt} · drag to zoom, double-click to reset`)),
        lat),
      h('div', {class: 'mx-chart-box'},
        h('div', {class: 'mx-chart-title'}, 'Throughput',
          h('span', {class: 'muted'},
            ` · calls per second, errors per second${open ? ' · the bucket in progress left out' : ''}`)),
        thr),
  );
  const line = (key, label, color, extra = {}) => ({label, color, values: pts.map((p) => p[key]), ...extra});
  S.charts.push(
      timeChart(lat, {
        xs,
        resMs: s.res_ms,
        yFormat: fmtMsAxis,
        bands,
        series: [
          line('p50_ms', 'p50', COLORS.p50), line('p95_ms', 'p95', COLORS.p95),
          line('p99_ms', 'p99', COLORS.p99, {width: 2}), line('max_ms', 'max', COLORS.max, {dash: [4, 3], width: 1})
        ],
      }),
      timeChart(thr, {
        xs,
        resMs: s.res_ms,
        yFormat: fmtRateAxis,
        bands,
        series: [
          {
            label: 'calls/s',
            color: COLORS.rate,
            values: pts.map((p) => (closed(p) ? p.rate : null)),
            bars: true,
            fill: 'rgba(14,165,233,.55)'
          },
          {
            label: 'errors/s',
            color: COLORS.errors,
            values: pts.map((p) => (closed(p) ? (p.errors * 1000) / s.res_ms : null)),
            width: 1.5
          },
        ],
      }),
  );
}

function fmtMsAxis(v) {
  if (v == null) return '—';
  if (v === 0) return '0';
  return ms(v);
}

function fmtRateAxis(v) {
  if (v == null) return '—';
  return v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2);
}

function alertsOf(it) {
  return S.alerts.filter((a) => a.subject === it.subject && a.env === it.env);
}

function seriesAlerts(it) {
  const list = alertsOf(it);
  if (!list.length) return h('div', {class: 'mx-series-alerts muted'}, 'No threshold rule finds this abnormal now.');
  return h(
      'div',
      {class: 'mx-series-alerts'},
      h('h3', null, 'Threshold events'),
      h(
          'ul',
          null,
          list.map(
              (a) =>
                  h('li', null, h('span', {class: 'badge bad'}, 'abnormal'), ' rule ', h('strong', null, a.rule),
                    ` since ${time(a.since_ms)} (${ago(a.since_ms)}); shaded on the charts`),
              ),
          ),
  );
}

function renderJvms(box, res) {
  const title = h('h3', null, 'Per JVM');
  if (res.status === 'rejected')
    return replace(box, title, notice('error', `Could not load the JVMs: ${errorText(res.reason)}`));
  const items = res.value.items || [];
  if (!items.length)
    return replace(
        box, title,
        h('div', {class: 'muted m-hint'},
          S.kind === 'method' ? 'The per-JVM breakdown is kept for transactions (methods are kept per environment).' :
                                'No per-JVM data in this window.'));
  const cols = [
    {
      key: 'agent',
      title: 'JVM',
      get: (r) => h('a', {href: `#/agents?agent=${r.agent}`, title: r.agent}, r.agent_name || r.agent)
    },
    {key: 'count', title: 'Count', class: 'num', get: (r) => count(r.count)},
    {key: 'rate', title: 'Rate/s', class: 'num', get: rateCell},
    {key: 'errors', title: 'Errors', class: 'num', get: errorsCell},
    {key: 'p50', title: 'p50', class: 'num', get: (r) => msCell(r.p50_ms)},
    {key: 'p95', title: 'p95', class: 'num', get: (r) => msCell(r.p95_ms)},
    {key: 'p99', title: 'p99', class: 'num', get: (r) => msCell(r.p99_ms)},
    {key: 'max', title: 'Max', class: 'num', get: (r) => msCell(r.max_ms)},
    {key: 'stalled', title: 'Stalled', class: 'num', get: (r) => count(r.stalled)},
    {
      key: 'slowest',
      title: 'Slowest',
      get: (r) => (r.slowest_trace ? h('a', {href: `#/trace/${r.slowest_trace}`}, 'trace ↗') : '—')
    },
  ];
  replace(box, title, sortTable({columns: cols, rows: items, className: 'm-compact'}));
}

// ---- stalled calls ----

function renderStalled(list) {
  const mine = S.env ? list.filter((s) => s.env === S.env) : list;
  if (!mine.length) return replace(S.parts.stalled);
  const cols = [
    {key: 'running', title: 'Running', class: 'num', get: (s) => h('span', {class: 'm-bad'}, ms(s.running_ms))},
    {key: 'jvm', title: 'JVM', get: (s) => s.agent_name},
    {key: 'thread', title: 'Thread', get: (s) => h('span', {title: `thread id ${s.thread_id}`}, s.thread)},
    {key: 'method', title: 'In', get: (s) => methodName(s.method, {withPackage: true})},
    {key: 'stack', title: 'Stack (root first)', get: stackCell},
    {key: 'started', title: 'Started', get: (s) => h('span', {title: time(s.started_ms)}, ago(s.started_ms))},
    {key: 'trace', title: 'Trace', get: (s) => (s.trace ? h('a', {href: `#/trace/${s.trace}`}, 'trace ↗') : '—')},
  ];
  replace(
      S.parts.stalled,
      h(
          'div',
          {class: 'panel'},
          h('div', {class: 'm-panel-head'}, h('h2', null, `Stalled calls (${mine.length})`),
            h('span', {class: 'muted'}, 'running past the stall threshold when their JVM last reported')),
          sortTable({columns: cols, rows: mine, className: 'm-compact'}),
          ),
  );
}

function stackCell(s) {
  const frames = s.stack || [];
  if (!frames.length) return '—';
  return h(
      'details',
      {class: 'mx-stack'},
      h('summary', null, `${frames.length} frames`),
      h('ol', null, frames.map((f) => h('li', {title: f}, splitMethod(f).short || f))),
  );
}
