// views/diagnoses.js - '#/diagnoses': look into a slow method's callees for a while
// (docs/DIAGNOSIS.md: select, discover, instrument conditionally, report, remove).
//
//   #/diagnoses                      active and ended diagnoses (GET /api/diagnoses)
//   #/diagnoses/new?method=&environment=&trace=
//                                    the form that starts one (POST /api/diagnoses)
//   #/diagnoses/<id>                 one diagnosis: its settings, a live countdown and Stop
//                                    while active; per JVM the tree of callees the
//                                    instrumenter discovered, with a checkbox per method that
//                                    can carry probes ("Apply selection" POSTs .../exclude);
//                                    live results merged into the tree and listed (GET
//                                    /api/diagnoses/<id>/report, every 3 s while active);
//                                    the tagged traces; the history of revisions.
import {clear, h, notice} from '../lib/dom.js';
import {ago, count, method as splitMethod, ns, shortId, time} from '../lib/format.js';
import {barCell, confirmDialog, errorText, field, methodName, poller, replace, sortTable} from '../lib/m-common.js';

let S = null;

export default {
  route: 'diagnoses',
  title: 'Diagnoses',
  nav: true,
  async mount(el, params, ctx) {
    S = {el, ctx, timers: [], polls: [], parts: {}};
    const id = params.path[1];
    if (!id) return mountList();
    if (id === 'new') return mountForm(params.query);
    return mountDetail(id);
  },
  unmount() {
    if (!S) return;
    S.polls.forEach((p) => p.stop());
    S.timers.forEach((t) => clearInterval(t));
    S = null;
  },
};

function writable() {
  return !S.ctx.session || S.ctx.session.writable !== false;
}

const STATE_KIND = {
  active: 'good',
  ended: ''
};

function stateBadge(d) {
  return h('span', {class: `badge ${STATE_KIND[d.state] ?? 'warn'}`}, d.state);
}

function causeText(d) {
  return d.cause === 'threshold' ? h('span', null, h('span', {class: 'badge warn'}, 'threshold'), ' ', d.rule || '') :
                                   h('span', {class: 'badge info'}, d.cause || 'user');
}

// "in 9 min" / "4 min ago"
function until(msv, now = Date.now()) {
  if (!msv) return '—';
  if (msv <= now) return ago(msv, now);
  const s = (msv - now) / 1000;
  return s < 60 ? `in ${Math.round(s)} s` : s < 3600 ? `in ${Math.round(s / 60)} min` : `in ${(s / 3600).toFixed(1)} h`;
}

function duration(msv) {
  if (!msv) return '—';
  const s = Math.round(msv / 1000);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min${s % 60 ? ` ${s % 60} s` : ''}`;
  return `${(s / 3600).toFixed(s % 3600 ? 1 : 0)} h`;
}

// ======================= (a) the list =======================

function mountList() {
  S.parts.list = h('div', {class: 'panel'}, notice('loading', 'Loading…'));
  S.parts.summary = h('span', {class: 'muted m-sub'});
  clear(S.el).append(
      h(
          'div',
          {class: 'm-head'},
          h('h1', null, 'Diagnoses'),
          S.parts.summary,
          h('div', {class: 'm-grow'}),
          h('a', {class: 'button primary', href: '#/diagnoses/new'}, '+ New diagnosis'),
          ),
      h('p', {class: 'muted dg-intro'},
        'A diagnosis discovers the methods a slow method calls that are not instrumented, instruments them so that they record only inside it (and only for matching requests), reports where the time goes, and removes the probes again when it ends.'),
      S.parts.list,
  );
  S.polls.push(poller(loadList, 5000));
}

async function loadList() {
  const mine = S;  // a later mount replaces S: what this call awaited is then not for it
  let r;
  try {
    r = await S.ctx.api.get('/api/diagnoses');
  } catch (e) {
    if (S === mine) replace(S.parts.list, notice('error', `Could not load the diagnoses: ${errorText(e)}`));
    return;
  }
  if (S !== mine) return;
  const list = r.diagnoses || [];
  const active = list.filter((d) => d.state === 'active').length;
  S.parts.summary.textContent = `${active} active · ${list.length - active} ended`;
  replace(S.parts.list, listTable(list));
}

function listTable(list) {
  return sortTable({
    rows: list,
    sort: S.listSort || null,
    onSort: (key, dir) => {
      S.listSort = {key, dir};
      loadList();
    },
    empty: 'No diagnosis yet. Start one from a slow method (Metrics → Diagnose) or with "New diagnosis".',
    rowAttrs: (d) => ({
      class: `m-click${d.state === 'active' ? ' dg-active-row' : ''}`,
      onclick: (e) => !e.target.closest('a') && S.ctx.navigate(`#/diagnoses/${d.id}`)
    }),
    columns: [
      {
        key: 'method',
        title: 'Method',
        sort: (d) => splitMethod(d.method).short,
        get: (d) => h('a', {href: `#/diagnoses/${d.id}`, class: 'dg-plain'}, methodName(d.method, {withPackage: true}))
      },
      {key: 'env', title: 'Environment', sort: (d) => d.environment, get: (d) => d.environment},
      {key: 'state', title: 'State', sort: (d) => d.state, get: stateBadge},
      {key: 'cause', title: 'Cause', sort: (d) => d.cause, get: causeText},
      {
        key: 'started',
        title: 'Started',
        sort: (d) => d.started_ms,
        get: (d) => h('span', {title: time(d.started_ms)}, ago(d.started_ms))
      },
      {
        key: 'ends',
        title: 'Ends / ended',
        sort: (d) => d.ended_ms || d.ends_ms,
        get: (d) =>
            (d.state === 'active' ? h('span', {title: time(d.ends_ms)}, until(d.ends_ms)) :
                                    h('span', {title: time(d.ended_ms)}, ago(d.ended_ms)))
      },
      {
        key: 'reason',
        title: 'End reason',
        sort: (d) => d.end_reason || '',
        get: (d) => (d.end_reason ? d.end_reason.replace(/_/g, ' ') : h('span', {class: 'muted'}, '—'))
      },
      {key: 'author', title: 'Author', sort: (d) => d.author, get: (d) => d.author || '—'},
      {key: 'id', title: 'Id', get: (d) => h('code', {class: 'muted', title: d.id}, shortId(d.id))},
    ],
  });
}

// ======================= (b) the form =======================

async function mountForm(q) {
  const mine = S;  // a later mount replaces S: what this call awaited is then not for it
  const f = {
    env: h('select', {name: 'environment', required: true, onchange: () => loadAgentChoices()}),
    method: h('input', {
      name: 'method',
      required: true,
      class: 'dg-wide mono',
      placeholder: 'com.shop.CheckoutService.checkout(I)Ljava/lang/String;  or  com.shop.CheckoutService.checkout',
      value: q.get('method') || ''
    }),
    when: h('input', {
      name: 'when',
      class: 'dg-wide mono',
      placeholder: 'http.path=/checkout*, http.method=POST, arg:0=ACME',
      value: q.get('when') || ''
    }),
    ttl: h('input', {name: 'ttl', value: '10m', size: 6}),
    maxHits: h('input', {name: 'max_hits', type: 'number', min: '0', placeholder: 'no limit', class: 'dg-num'}),
    budget: h('input', {name: 'budget', type: 'number', min: '0', step: '0.1', placeholder: 'none', class: 'dg-num'}),
    depth: h('input', {name: 'depth', type: 'number', min: '1', max: '10', value: '3', class: 'dg-num'}),
    jdk: h('input', {name: 'include_jdk', type: 'checkbox'}),
    agents: h('div', {class: 'dg-agents'}, h('span', {class: 'muted'}, 'Loading agents…')),
    error: h('div'),
    submit: h('button', {type: 'submit', class: 'primary', disabled: !writable()}, 'Start diagnosis'),
  };
  S.form = f;
  S.trace = q.get('trace') || '';
  const form = h(
      'form',
      {class: 'panel dg-form', onsubmit: (e) => (e.preventDefault(), submitForm())},
      formRow('Environment', f.env, 'where: every JVM of it, or only the agents ticked below'),
      formRow(
          'Method', f.method,
          'the slow method, in the JVM form pkg.Class.name(descriptor); without a descriptor every overload'),
      formRow('Conditions', f.when, null, conditionsHelp()),
      h(
          'div',
          {class: 'dg-limits'},
          field('Time to live', f.ttl, 'at most 7d; e.g. 30s, 10m, 2h'),
          field('Max hits', f.maxHits, 'the diagnosis ends after this many anchor entries in context'),
          field(
              'Overhead budget %', f.budget,
              'ends when the estimated overhead exceeds this share of the method\'s time'),
          field('Depth', f.depth, 'how many calls deep callees are discovered'),
          h('label', {class: 'dg-check'}, f.jdk, ' include JDK methods'),
          ),
      formRow(
          'Agents', f.agents,
          'optional: none ticked means every JVM of the environment, also those that start while it runs'),
      S.trace ? formRow(
                    'From trace', h('a', {href: `#/trace/${S.trace}`}, h('code', null, S.trace)),
                    'the trace this diagnosis was started from') :
                null,
      f.error,
      h('div', {class: 'env-buttons'}, f.submit, h('a', {class: 'button', href: '#/diagnoses'}, 'Cancel'),
        writable() ? null : h('span', {class: 'muted'}, 'cmr-ui is read-only')),
  );
  clear(S.el).append(
      h('div', {class: 'env-back'}, h('a', {href: '#/diagnoses'}, '← Diagnoses')),
      h('div', {class: 'm-head'}, h('h1', null, 'New diagnosis')), form);
  await loadEnvChoices(q.get('environment') || '');
  loadAgentChoices();
  (f.method.value ? f.when : f.method).focus();
}

function formRow(label, control, hint, extra) {
  return h(
      'div', {class: 'dg-row'}, h('div', {class: 'dg-label'}, label),
      h('div', {class: 'dg-control'}, control, hint ? h('div', {class: 'dg-hint muted'}, hint) : null, extra));
}

function conditionsHelp() {
  const c = (k, t) => h('li', null, h('code', null, k), ` ${t}`);
  return h(
      'details',
      {class: 'dg-hint dg-help'},
      h('summary', null, 'Optional, comma-separated; all must hold when the method is entered. Each value is a glob.'),
      h(
          'ul',
          null,
          c('http.method=POST', 'the request\'s method'),
          c('http.path=/checkout*', 'the request\'s path (decoded, without ;jsessionid=…)'),
          c('http.header:X-Tenant=acme', 'a request header'),
          c('http.param:sku=12*', 'a query parameter (never the body)'),
          c('arg:0=ACME',
            'parameter 0-3 of the method: a string, JDK number, boolean, character or enum constant\'s name'),
          ),
      h('div', {class: 'muted'},
        'Without an HTTP request the http.* conditions do not hold. http.status and sql are refused: they are not known when the method is entered.'),
  );
}

async function loadEnvChoices(wanted) {
  const mine = S;  // a later mount replaces S: what this call awaited is then not for it
  let envs = [];
  try {
    envs = (await S.ctx.api.get('/api/environments')).environments || [];
  } catch (e) {
    console.warn('environments', e);
  }
  if (S !== mine) return;
  const ids = envs.map((e) => e.id);
  if (wanted && !ids.includes(wanted)) envs.push({id: wanted, name: wanted});
  replace(
      S.form.env,
      ...envs.map(
          (e) =>
              h('option', {value: e.id, selected: e.id === wanted},
                e.name && e.name !== e.id ? `${e.id} — ${e.name}` : e.id)));
  if (!envs.length) S.form.env.append(h('option', {value: ''}, 'no environment'));
}

async function loadAgentChoices() {
  const mine = S;  // a later mount replaces S: what this call awaited is then not for it
  const env = S.form.env.value;
  let agents = [];
  try {
    agents = (await S.ctx.api.get('/api/agents')).agents || [];
  } catch (e) {
    if (S === mine) replace(S.form.agents, h('span', {class: 'm-bad'}, `Could not load the agents: ${errorText(e)}`));
    return;
  }
  if (S !== mine || S.form.env.value !== env) return;
  const ofEnv = agents.filter((a) => a.environment === env);
  if (!ofEnv.length) return replace(S.form.agents, h('span', {class: 'muted'}, `No agent of "${env}" has reported.`));
  replace(
      S.form.agents,
      ...ofEnv.map(
          (a) =>
              h('label', {class: 'dg-check dg-agent'}, h('input', {type: 'checkbox', value: a.agent}),
                h('span', null, a.name), h('code', {class: 'muted'}, shortId(a.agent)),
                h('span', {class: `badge ${a.state === 'SHUTDOWN' ? '' : 'good'}`}, a.state)),
          ),
  );
}

function formBody() {
  const f = S.form;
  const body = {environment: f.env.value, method: f.method.value.trim()};
  const when = f.when.value.trim();
  if (when) body.when = when;
  if (f.ttl.value.trim()) body.ttl = f.ttl.value.trim();
  if (f.maxHits.value) body.max_hits = Number(f.maxHits.value);
  if (f.budget.value) body.budget = `${f.budget.value}%`;
  if (f.depth.value) body.depth = Number(f.depth.value);
  if (f.jdk.checked) body.include_jdk = true;
  const agents = [...f.agents.querySelectorAll('input:checked')].map((i) => i.value);
  if (agents.length) body.agents = agents;
  if (S.trace) body.trace = S.trace;
  return body;
}

async function submitForm() {
  const mine = S;  // a later mount replaces S: what this call awaited is then not for it
  const f = S.form;
  replace(f.error);
  f.submit.disabled = true;
  try {
    const r = await S.ctx.api.post('/api/diagnoses', formBody());
    if (S !== mine) return;
    S.ctx.toast('Diagnosis started.', 'good');
    S.ctx.navigate(`#/diagnoses/${r.id}`);
  } catch (e) {
    if (S !== mine) return;
    f.submit.disabled = !writable();
    const hint =
        e.status === 409 ? ' A diagnosis of this method is already active in this environment; see the list.' : '';
    replace(f.error, h('div', {class: 'm-error-box', role: 'alert'}, `Not started: ${errorText(e)}.${hint}`));
  }
}

// ======================= (c) one diagnosis =======================

async function mountDetail(id) {
  const mine = S;  // a later mount replaces S: what this call awaited is then not for it
  S.id = id;
  S.pending = new Map();  // method -> wanted ticked state, while the user edits the trees
  S.report = null;
  replace(S.el, notice('loading', 'Loading…'));
  learnAgentNames();
  try {
    await loadDiagnosis();
  } catch (e) {
    if (S === mine)
      replace(
          S.el, h('div', {class: 'env-back'}, h('a', {href: '#/diagnoses'}, '← Diagnoses')),
          notice('error', e.status === 404 ? `No diagnosis ${id}.` : `Could not load the diagnosis: ${errorText(e)}`));
    return;
  }
  if (S !== mine) return;
  renderDetailFrame();
  S.timers.push(setInterval(tickCountdown, 1000));
  startReportPolling();
}

async function loadDiagnosis() {
  const mine = S;  // a later mount replaces S: what this call awaited is then not for it
  const r = await S.ctx.api.get(`/api/diagnoses/${S.id}`);
  if (S !== mine) return false;
  const sig = signature(r);
  const changed = sig !== S.sig;
  S.data = r;
  S.sig = sig;
  return changed;
}

// What, when it changes, makes the header and trees be drawn again.
function signature(r) {
  return JSON.stringify([
    r.diagnosis.revision, r.diagnosis.state, (r.trees || []).map((t) => [t.agent, t.revision, t.nodes.length, t.error])
  ]);
}

function startReportPolling() {
  let turns = 0;
  const mine = S;
  const p = poller(async () => {
    if (S !== mine) return;
    if (turns++ > 0 && S.data.diagnosis.state === 'active' && turns % 3 === 0) {
      if (await loadDiagnosis()) redraw();
    }
    if (S !== mine) return;
    await loadReport();
    if (S === mine && S.data.diagnosis.state !== 'active') p.stop();
  }, 3000);
  S.polls.push(p);
}

function redraw() {
  if (!S) return;
  renderHeader();
  if (!S.pending.size) renderTrees();
  renderHistory();
}

function renderDetailFrame() {
  const p = S.parts;
  p.header = h('div');
  p.trees = h('div', {class: 'panel dg-trees'});
  p.results = h('div', {class: 'dg-results'});
  p.history = h('div');
  clear(S.el).append(
      h('div', {class: 'env-back'}, h('a', {href: '#/diagnoses'}, '← Diagnoses')), p.header, p.trees, p.results,
      p.history);
  redraw();
  renderResults();
}

// ---- header ----

function renderHeader() {
  const d = S.data.diagnosis;
  const m = splitMethod(d.method);
  const active = d.state === 'active';
  S.parts.countdown = h('span', {class: 'dg-countdown'});
  replace(
      S.parts.header,
      h(
          'div',
          {class: 'm-head dg-head'},
          h('h1', {title: d.method}, m.short || d.method),
          stateBadge(d),
          d.end_reason ? h('span', {class: 'muted'}, `ended: ${d.end_reason.replace(/_/g, ' ')}`) : null,
          active ? h('span', {class: 'dg-left'}, 'time left ', S.parts.countdown) : null,
          h('div', {class: 'm-grow'}),
          h('a', {class: 'button', href: `#/traces?contains=${encodeURIComponent(d.method)}&from=${d.started_ms}`},
            'Traces of this method'),
          active ?
              h('button', {type: 'button', class: 'danger', disabled: !writable(), onclick: stopDiagnosis}, 'Stop') :
              null,
          ),
      h('div', {class: 'panel dg-facts'}, factsGrid(d)),
  );
  tickCountdown();
}

function factsGrid(d) {
  const fact = (k, v) => [h('dt', null, k), h('dd', null, v)];
  const limits = [
    `time to live ${duration(d.ttl_ms)}`, d.max_hits ? `max ${count(d.max_hits)} hits` : null,
    d.budget_pct ? `overhead budget ${d.budget_pct} %` : null, `depth ${d.depth}`,
    d.include_jdk ? 'JDK included' : null,
    d.until_normal_ms && d.cause === 'threshold' ? `ends ${duration(d.until_normal_ms)} after back to normal` : null
  ].filter(Boolean);
  return h(
      'dl',
      {class: 'dg-dl'},
      fact('Method', h('code', {class: 'dg-full'}, d.method)),
      fact('Environment', h('a', {href: `#/environments/${encodeURIComponent(d.environment)}`}, d.environment)),
      fact('Cause', causeText(d)),
      fact(
          'Conditions',
          (d.conditions || []).length ? d.conditions.map((c) => h('code', {class: 'dg-cond'}, c)) :
                                        h('span', {class: 'muted'}, 'none: every call of the method')),
      fact('Started', h('span', {title: ago(d.started_ms)}, time(d.started_ms))),
      fact(d.state === 'active' ? 'Ends' : 'Ended', time(d.state === 'active' ? d.ends_ms : d.ended_ms)),
      fact('Limits', limits.join(' · ')),
      fact(
          'Agents',
          (d.agents || []).length ? d.agents.map((a) => h('code', {class: 'dg-cond', title: a}, shortId(a))) :
                                    'every JVM of the environment'),
      (d.exclude || []).length ? fact('Unticked', d.exclude.map((x) => h('span', {class: 'dg-cond'}, methodName(x)))) :
                                 null,
      fact('Revision', `${d.revision} · ${time(d.time_ms)}`),
      fact('Author', d.author || '—'),
      d.trace_id ? fact('From trace', h('a', {href: `#/trace/${d.trace_id}`}, h('code', null, d.trace_id))) : null,
      fact('Id', h('code', null, d.id)),
  );
}

function tickCountdown() {
  if (!S || !S.parts.countdown || !S.data) return;
  const d = S.data.diagnosis;
  const left = Math.max(0, d.ends_ms - Date.now());
  const s = Math.floor(left / 1000);
  S.parts.countdown.textContent = `${Math.floor(s / 60)}:${String(s % 60).padStart(2, '0')}`;
  S.parts.countdown.classList.toggle('dg-soon', s < 60);
}

async function stopDiagnosis() {
  const mine = S;  // a later mount replaces S: what this call awaited is then not for it
  const d = S.data.diagnosis;
  const ok = await confirmDialog(`Stop the diagnosis of ${splitMethod(d.method).short}?`, 'Stop', {
    danger: true,
    detail: 'Its probes are taken out of every JVM (the environment\'s bytes are sent again). What was recorded stays.',
  });
  if (!ok || S !== mine) return;
  try {
    await S.ctx.api.post(`/api/diagnoses/${S.id}/stop`, {});
    if (S !== mine) return;
    S.ctx.toast('Diagnosis stopped.', 'good');
    await loadDiagnosis();
    redraw();
    loadReport();
  } catch (e) {
    if (S === mine) S.ctx.toast(`Could not stop: ${errorText(e)}`, 'error');
  }
}

// ---- the discovered trees ----

const PROBE_TEXT = {
  anchor: 'anchor: the selected method; enters the diagnosis\' context',
  conditional: 'conditional probes: record only inside the anchor',
  environment: 'instrumented by the environment: records anyway, cannot be unticked here',
  none: 'no probe',
};

function nodeKey(method) {
  return String(method || '').replace(/\//g, '.');
}

function excludedSet() {
  return new Set((S.data.diagnosis.exclude || []).map(nodeKey));
}

// Whether a node's checkbox can change, and whether it is ticked now (before the user's edits).
function nodeChoice(n, excluded) {
  const key = nodeKey(n.method);
  if (n.probe === 'anchor' || n.parent < 0) return {box: true, fixed: true, ticked: true, why: PROBE_TEXT.anchor};
  if (n.probe === 'environment') return {box: true, fixed: true, ticked: true, why: PROBE_TEXT.environment};
  if (excluded.has(key)) return {box: true, fixed: false, ticked: false, why: 'unticked: no probes'};
  if (n.probe === 'conditional') return {box: true, fixed: false, ticked: true, why: PROBE_TEXT.conditional};
  return {box: false, why: n.note || n.status};
}

function renderTrees() {
  const trees = S.data.trees || [];
  const ended = S.data.diagnosis.state !== 'active';
  S.rowCells = [];
  S.parts.applyBtn =
      h('button', {type: 'button', class: 'primary', disabled: true, onclick: applySelection}, 'Apply selection');
  S.parts.pendingText = h('span', {class: 'muted'});
  const head = h(
      'div',
      {class: 'm-panel-head dg-tree-head'},
      h('h2', null, 'Discovered callees'),
      h('span', {class: 'muted'}, 'per JVM, from the bytecode it loaded · ticked methods carry conditional probes'),
      h('div', {class: 'm-grow'}),
      S.parts.pendingText,
      ended ? h('span', {class: 'muted'}, 'ended: the selection can no longer change') : S.parts.applyBtn,
  );
  const body = trees.length ?
      trees.map((t) => treeCard(t, ended)) :
      h('div', {class: 'muted m-hint'},
        'No tree yet: the instrumenter makes one per JVM of the environment within seconds of the start.');
  replace(S.parts.trees, head, body, legend());
  updatePending();
  fillMetricCells();
}

function legend() {
  return h(
      'div',
      {class: 'dg-legend muted'},
      h('span', null, h('span', {class: 'badge info'}, 'anchor'), ' the selected method'),
      h('span', null, h('span', {class: 'badge good'}, 'conditional'),
        ' records only inside the anchor, for matching requests'),
      h('span', null, h('span', {class: 'badge'}, 'environment'), ' instrumented by the environment anyway'),
      h('span', null, h('i', null, 'italic'), ': no probe (not loaded, JDK, too deep, met before, excluded …)'),
  );
}

function treeCard(t, ended) {
  const agentName = agentLabel(t.agent);
  const head = h(
      'div',
      {class: 'dg-tree-title'},
      h('strong', null, agentName),
      h('code', {class: 'muted'}, t.agent),
      h('span', {class: 'muted'},
        `revision ${t.revision} · ${time(t.time_ms)} · ${count(t.classes_read)} classes read · ${
            t.nodes.length} methods`),
      t.truncated ? h('span', {class: 'badge warn', title: 'the node bound was reached'}, 'truncated') : null,
  );
  if (t.error) return h('div', {class: 'dg-tree'}, head, h('div', {class: 'dg-tree-error'}, `No tree: ${t.error}`));
  return h('div', {class: 'dg-tree'}, head, h('div', {class: 'm-scroll'}, treeTable(t, ended)));
}

function agentLabel(id) {
  const a = (S.agentNames && S.agentNames.get(id)) || null;
  return a || `JVM ${shortId(id)}`;
}

function treeTable(t, ended) {
  const excluded = excludedSet();
  const depth = [];
  const rows = t.nodes.map((n, i) => {
    depth[i] = n.parent < 0 ? 0 : depth[n.parent] + 1;
    return treeRow(n, depth[i], nodeChoice(n, excluded), ended);
  });
  return h(
      'table',
      {class: 'grid m-table m-compact dg-tree-table'},
      h(
          'thead',
          null,
          h('tr', null, h('th', {class: 'dg-cb'}, ''), h('th', null, 'Method'), h('th', null, 'Via'),
            h('th', null, 'Status'), h('th', {class: 'num'}, 'Calls'), h('th', {class: 'num'}, 'Total'),
            h('th', {class: 'num'}, 'Self'), h('th', {class: 'num'}, 'p99'), h('th', {class: 'num'}, 'Max')),
          ),
      h('tbody', null, rows),
  );
}

function treeRow(n, depth, choice, ended) {
  const key = nodeKey(n.method);
  const wanted = S.pending.has(key) ? S.pending.get(key) : choice.ticked;
  const cb = choice.box ? h('input', {
    type: 'checkbox',
    checked: wanted,
    disabled: choice.fixed || ended,
    title: choice.why,
    dataset: {method: key},
    onchange: (e) => onTick(key, n.method, e.target.checked, choice.ticked)
  }) :
                          null;
  const cells = {
    calls: h('td', {class: 'num'}),
    total: h('td', {class: 'num'}),
    self: h('td', {class: 'num'}),
    p99: h('td', {class: 'num'}),
    max: h('td', {class: 'num'})
  };
  S.rowCells.push({key, id: n.method_id, cells, probed: choice.box && wanted});
  const noProbe = !choice.box;
  return h(
      'tr',
      {class: `${noProbe ? 'dg-noprobe' : ''}${choice.box && !wanted ? ' dg-unticked' : ''}`},
      h('td', {class: 'dg-cb'}, cb),
      h('td', {class: 'dg-mcell'},
        h('span', {class: 'dg-indent', style: {paddingLeft: `${depth * 18}px`}},
          depth ? h('span', {class: 'dg-elbow'}, '└ ') : null, methodName(n.method, {withPackage: true}),
          n.call_sites > 1 ? h('span', {class: 'muted dg-sites'}, ` ×${n.call_sites} call sites`) : null)),
      h('td', {class: 'muted'}, n.via),
      h('td', null, statusCell(n, choice)),
      cells.calls,
      cells.total,
      cells.self,
      cells.p99,
      cells.max,
  );
}

function statusCell(n, choice) {
  if (!choice.box)
    return h('i', {class: 'muted', title: n.note || ''}, n.status.replace(/_/g, ' '), n.note ? ` — ${n.note}` : '');
  const kind = n.probe === 'anchor' ? 'info' : n.probe === 'conditional' ? 'good' : '';
  return h(
      'span', {title: choice.why}, h('span', {class: `badge ${kind}`}, n.probe === 'none' ? 'unticked' : n.probe),
      n.note ? h('span', {class: 'muted'}, ` ${n.note}`) : null);
}

function onTick(key, method, checked, initially) {
  if (checked === initially)
    S.pending.delete(key);
  else
    S.pending.set(key, checked);
  S.pendingNames = S.pendingNames || new Map();
  S.pendingNames.set(key, method);
  for (const box of S.parts.trees.querySelectorAll('input[type=checkbox]'))
    if (box.dataset.method === key) box.checked = checked;
  updatePending();
}

function updatePending() {
  const n = S.pending.size;
  if (S.parts.applyBtn) S.parts.applyBtn.disabled = !n || !writable();
  if (S.parts.pendingText) S.parts.pendingText.textContent = n ? `${n} change${n === 1 ? '' : 's'} not applied` : '';
}

async function applySelection() {
  const mine = S;  // a later mount replaces S: what this call awaited is then not for it
  const exclude = [];
  const include = [];
  for (const [key, ticked] of S.pending) (ticked ? include : exclude).push(S.pendingNames.get(key) || key);
  S.parts.applyBtn.disabled = true;
  try {
    const r = await S.ctx.api.post(`/api/diagnoses/${S.id}/exclude`, {exclude, include});
    if (S !== mine) return;
    S.ctx.toast(`Selection applied: revision ${r.revision}. The probes follow within seconds.`, 'good');
    S.pending.clear();
    S.sig = null;
    await loadDiagnosis();
    redraw();
    renderTrees();
  } catch (e) {
    if (S !== mine) return;
    updatePending();
    S.ctx.toast(`Could not apply the selection: ${errorText(e)}`, 'error');
  }
}

// ---- live results ----

async function loadReport() {
  const mine = S;  // a later mount replaces S: what this call awaited is then not for it
  let r;
  try {
    r = await S.ctx.api.get(`/api/diagnoses/${S.id}/report`, {limit: 200});
  } catch (e) {
    if (S !== mine) return;
    S.reportError = e;
    renderResults();
    return;
  }
  if (S !== mine) return;
  S.report = r;
  S.reportError = null;
  S.reportAt = Date.now();
  learnAgentNames();
  fillMetricCells();
  renderResults();
}

// The report's traces name their root JVM; the trees only have agent ids. Names come from
// /api/agents once.
async function learnAgentNames() {
  const mine = S;  // a later mount replaces S: what this call awaited is then not for it
  if (S.agentNames) return;
  S.agentNames = new Map();
  try {
    const r = await S.ctx.api.get('/api/agents');
    if (S !== mine) return;
    for (const a of r.agents || []) S.agentNames.set(a.agent, a.name);
    for (const el of S.el.querySelectorAll('.dg-tree-title strong')) {
      const id = el.nextSibling && el.nextSibling.textContent;
      if (S.agentNames.has(id)) el.textContent = S.agentNames.get(id);
    }
  } catch (e) {
    console.warn('agents', e);
  }
}

function methodStats() {
  const byId = new Map();
  const byName = new Map();
  for (const m of (S.report && S.report.methods) || []) {
    if (m.method_id) byId.set(m.method_id, m);
    byName.set(nodeKey(m.method), m);
  }
  return {byId, byName};
}

function fillMetricCells() {
  if (!S.rowCells || !S.report) return;
  const {byId, byName} = methodStats();
  for (const r of S.rowCells) {
    const m = byName.get(r.key) || (r.id && byId.get(r.id));
    if (!m) {
      replace(
          r.cells.calls,
          h('i', {class: 'muted'}, r.probed ? (S.data.diagnosis.state === 'active' ? 'no data yet' : 'no data') : ''));
      for (const k of ['total', 'self', 'p99', 'max']) replace(r.cells[k]);
      continue;
    }
    r.cells.calls.textContent = count(m.calls);
    r.cells.total.textContent = ns(m.total_ns);
    r.cells.self.textContent = ns(m.self_ns);
    r.cells.p99.textContent = ns(m.p99_ns);
    r.cells.max.textContent = ns(m.max_ns);
  }
}

function renderResults() {
  const r = S.report;
  const d = S.data.diagnosis;
  if (!r)
    return replace(
        S.parts.results,
        S.reportError ?
            h('div', {class: 'panel'}, notice('error', `Could not load the results: ${errorText(S.reportError)}`)) :
            h('div', {class: 'panel'}, notice('loading', 'Loading results…')));
  const live = d.state === 'active' ?
      h('span', {class: 'ag-live muted'}, h('span', {class: 'ag-dot'}), 'live · every 3 s') :
      h('span', {class: 'muted'}, 'final');
  replace(
      S.parts.results,
      S.reportError ?
          h('div', {class: 'm-error-box'}, `Refresh failed: ${errorText(S.reportError)} (showing the last answer)`) :
          null,
      h(
          'div',
          {class: 'dg-results-grid'},
          h('div', {class: 'panel'},
            h('div', {class: 'm-panel-head'}, h('h2', null, 'Where the time goes'),
              h('span', {class: 'muted'},
                `${count(r.found)} tagged trace${r.found === 1 ? '' : 's'} found${
                    r.found ? ` · statistics over the newest ${count(Math.min(r.found, r.limit))}` : ''}`),
              h('div', {class: 'm-grow'}), live),
            methodsPanel(r)),
          h('div', {class: 'panel'},
            h('div', {class: 'm-panel-head'}, h('h2', null, 'Tagged traces'),
              h('span', {class: 'muted'}, 'newest first')),
            tracesList(r)),
          ),
  );
}

function methodsPanel(r) {
  const discovered = new Set((S.rowCells || []).map((c) => c.key));
  S.onlyDiscovered = S.onlyDiscovered ?? discovered.size > 0;
  const all = r.methods || [];
  const rows = S.onlyDiscovered && discovered.size ? all.filter((m) => discovered.has(nodeKey(m.method))) : all;
  const toggle = discovered.size ? h('label', {class: 'dg-check dg-only'}, h('input', {
                                       type: 'checkbox',
                                       checked: S.onlyDiscovered,
                                       onchange: (e) => ((S.onlyDiscovered = e.target.checked), renderResults())
                                     }),
                                     ` only the discovered methods (${rows.length} of ${all.length})`) :
                                   null;
  const maxTotal = Math.max(1, ...rows.map((m) => m.total_ns));
  return h(
      'div',
      null,
      toggle,
      sortTable({
        className: 'm-compact',
        rows,
        sort: S.methodSort || {key: 'total', dir: 'desc'},
        onSort: (key, dir) => ((S.methodSort = {key, dir}), renderResults()),
        empty: 'No data yet: the tagged traces arrive within seconds of a call in context.',
        rowAttrs: (m) => ({class: discovered.has(nodeKey(m.method)) ? 'dg-discovered' : null}),
        columns: [
          {
            key: 'method',
            title: 'Method',
            sort: (m) => m.method,
            get: (m) => methodName(m.method, {withPackage: true})
          },
          {key: 'calls', title: 'Calls', class: 'num', sort: (m) => m.calls, get: (m) => count(m.calls)},
          {key: 'traces', title: 'Traces', class: 'num', sort: (m) => m.traces, get: (m) => count(m.traces)},
          {
            key: 'total',
            title: 'Total',
            class: 'num',
            sort: (m) => m.total_ns,
            get: (m) => barCell(ns(m.total_ns), m.total_ns / maxTotal)
          },
          {key: 'self', title: 'Self', class: 'num', sort: (m) => m.self_ns, get: (m) => ns(m.self_ns)},
          {key: 'p50', title: 'p50', class: 'num', sort: (m) => m.p50_ns, get: (m) => ns(m.p50_ns)},
          {key: 'p95', title: 'p95', class: 'num', sort: (m) => m.p95_ns, get: (m) => ns(m.p95_ns)},
          {key: 'p99', title: 'p99', class: 'num', sort: (m) => m.p99_ns, get: (m) => ns(m.p99_ns)},
          {key: 'max', title: 'Max', class: 'num', sort: (m) => m.max_ns, get: (m) => ns(m.max_ns)},
        ],
      }),
  );
}

function tracesList(r) {
  const list = (r.traces || []).slice().sort((a, b) => b.start_ns - a.start_ns).slice(0, 50);
  if (!list.length) return h('div', {class: 'muted m-hint'}, 'No tagged trace yet.');
  const maxDur = Math.max(1, ...list.map((t) => t.duration_ns));
  return h(
      'div',
      {class: 'dg-traces'},
      sortTable({
        className: 'm-compact',
        rows: list,
        columns: [
          {
            title: 'Trace',
            get: (t) => h('a', {href: `#/trace/${t.trace_id}`, title: t.trace_id}, h('code', null, shortId(t.trace_id)))
          },
          {title: 'Started', get: (t) => h('span', {title: time(t.start_ns)}, time(t.start_ns).slice(11))},
          {title: 'Duration', class: 'num', get: (t) => barCell(ns(t.duration_ns), t.duration_ns / maxDur, '#fde68a')},
          {
            title: 'Root',
            get: (t) =>
                (t.http && t.http.path ?
                     h('span', {class: 'mono'},
                       `${t.http.method || ''} ${t.http.path}${t.http.status ? ` → ${t.http.status}` : ''}`) :
                                                                               methodName(t.root_method))
          },
          {title: 'JVMs', class: 'num', get: (t) => count(t.jvms)},
        ],
      }),
      r.traces.length > list.length ?
          h('div', {class: 'muted m-hint'}, `${list.length} of the ${count(r.traces.length)} loaded`) :
          null,
  );
}

// ---- history ----

function renderHistory() {
  const hist = (S.data.history || []).slice().sort((a, b) => b.revision - a.revision);
  if (!hist.length) return replace(S.parts.history);
  replace(
      S.parts.history,
      h(
          'details',
          {class: 'panel dg-history'},
          h('summary', null, h('strong', null, 'History'),
            h('span', {class: 'muted'}, ` · ${hist.length} revision${hist.length === 1 ? '' : 's'}`)),
          sortTable({
            className: 'm-compact',
            rows: hist,
            columns: [
              {title: 'Revision', class: 'num', get: (d) => String(d.revision)},
              {title: 'Time', get: (d) => time(d.time_ms)},
              {title: 'State', get: stateBadge},
              {title: 'End reason', get: (d) => (d.end_reason ? d.end_reason.replace(/_/g, ' ') : '—')},
              {
                title: 'Unticked',
                get: (d) => ((d.exclude || []).length ? d.exclude.map((x) => h('div', null, methodName(x))) : '—')
              },
              {title: 'Conditions', get: (d) => ((d.conditions || []).length ? d.conditions.join(', ') : '—')},
              {title: 'Author', get: (d) => d.author || '—'},
            ],
          }),
          ),
  );
}
