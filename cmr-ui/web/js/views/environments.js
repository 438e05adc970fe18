// views/environments.js - '#/environments': the environments (instrumentation configurations)
// and the agent mapping table that cmr-ui projects from cmr.config.
//
//   #/environments              the list (GET /api/environments)
//   #/environments/<id>         one environment's YAML, read-only, with line numbers
//                               (GET /api/environments/<id>; the id "mappings" is the table),
//                               and the methods the overhead budget took the probes of, with
//                               the reason (named through GET /api/methods?ids=)
//   #/environments/<id>?edit=1  the editor: the whole document `cmr-config apply` reads
//   #/environments?edit=1       the editor with an empty document, to paste a file
//
// The editor shows a line diff against the text it started from (js/lib/m-linediff.js),
// "Check" asks what applying would do (POST /api/environments/plan, nothing written) and
// "Apply" publishes every change in one Kafka transaction (POST /api/environments/apply):
// all of them or none.
import {h, notice} from '../lib/dom.js';
import {ago, count, ns, time} from '../lib/format.js';
import {confirmDialog, errorText, methodName, replace, sortTable} from '../lib/m-common.js';
import {diffLines, hunks, stats} from '../lib/m-linediff.js';

let S = null;

export default {
  route: 'environments',
  title: 'Environments',
  nav: true,
  async mount(el, params, ctx) {
    S = {el, ctx, id: params.path[1] || '', edit: params.query.get('edit') === '1', parts: {}};
    if (S.id)
      await showOne();
    else
      await showList();
  },
  unmount() {
    if (S) clearTimeout(S.diffTimer);
    S = null;
  },
};

function writable() {
  return !S.ctx.session || S.ctx.session.writable !== false;
}

// ---- the list ----

async function showList() {
  const mine = S;  // a later mount replaces S: what this call awaited is then not for it
  const el = S.el;
  replace(el, notice('loading', 'Loading…'));
  let r;
  try {
    r = await S.ctx.api.get('/api/environments');
  } catch (e) {
    if (S === mine) replace(el, notice('error', `Could not load the environments: ${errorText(e)}`));
    return;
  }
  if (S !== mine) return;
  const envs = r.environments || [];
  const m = r.mappings || {revision: 0, count: 0};
  replace(
      el,
      h(
          'div',
          {class: 'm-head'},
          h('h1', null, 'Environments'),
          h('span', {class: 'muted m-sub'},
            `${envs.length} environment${envs.length === 1 ? '' : 's'} · which classes and methods get which sensor`),
          h('div', {class: 'm-grow'}),
          S.edit ? null : h('a', {class: 'button primary', href: '#/environments?edit=1'}, 'Apply a YAML file…'),
          ),
      S.edit ? editorPanel('', 'a new file') : null,
      h('div', {class: 'panel'}, h('div', {class: 'm-panel-head'}, h('h2', null, 'Environments')), envTable(envs)),
      h(
          'div',
          {class: 'panel'},
          h('div', {class: 'm-panel-head'}, h('h2', null, 'Agent mappings'),
            h('span', {class: 'muted'},
              'the first mapping whose agent glob and address match sends a JVM to its environment')),
          h(
              'div',
              {class: 'env-mappings'},
              h('span', null, h('strong', null, count(m.count)), ` mapping${m.count === 1 ? '' : 's'}`),
              h('span', {class: 'muted'}, `revision ${m.revision}`),
              h('a', {href: '#/environments/mappings'}, 'Show the table →'),
              ),
          ),
  );
}

function envTable(envs) {
  return sortTable({
    rows: envs,
    empty: 'No environment yet. Apply a YAML file to create one.',
    rowAttrs: (e) => ({
      class: 'm-click',
      onclick: (ev) => !ev.target.closest('a') && S.ctx.navigate(`#/environments/${encodeURIComponent(e.id)}`)
    }),
    columns: [
      {
        key: 'id',
        title: 'Id',
        sort: (e) => e.id,
        get: (e) => h('a', {href: `#/environments/${encodeURIComponent(e.id)}`}, h('code', null, e.id))
      },
      {key: 'name', title: 'Name', sort: (e) => e.name, get: (e) => e.name},
      {key: 'rev', title: 'Revision', class: 'num', sort: (e) => e.revision, get: (e) => count(e.revision)},
      {key: 'sensors', title: 'Sensor assignments', class: 'num', sort: (e) => e.sensors, get: (e) => count(e.sensors)},
      {
        key: 'budget',
        title: 'Budget removals',
        class: 'num',
        hint: 'methods whose probes the overhead budget took out in the current revision',
        sort: (e) => e.budget_removed || 0,
        get: (e) => count(e.budget_removed || 0)
      },
      {
        key: 'go',
        title: '',
        get: (e) =>
            h('span', {class: 'env-links'}, h('a', {href: `#/metrics?env=${encodeURIComponent(e.id)}`}, 'metrics'),
              h('a', {href: `#/agents?q=${encodeURIComponent(e.id)}`}, 'agents'))
      },
    ],
  });
}

// ---- one environment ----

async function showOne() {
  const mine = S;  // a later mount replaces S: what this call awaited is then not for it
  replace(S.el, notice('loading', 'Loading…'));
  let env;
  try {
    env = await S.ctx.api.get(`/api/environments/${encodeURIComponent(S.id)}`);
  } catch (e) {
    if (S)
      replace(
          S.el, backLink(),
          notice(
              'error', e.status === 404 ? `No environment "${S.id}".` : `Could not load "${S.id}": ${errorText(e)}`));
    return;
  }
  if (S !== mine) return;
  S.env = env;
  const budget = env.budget && !S.edit ? env.budget : null;
  S.names = budget ? await methodNames(budget.removals.map((r) => r.method_id)) : new Map();
  if (S !== mine) return;
  const yaml = env.yaml || '';
  replace(
      S.el,
      backLink(),
      h(
          'div',
          {class: 'm-head'},
          h('h1', null, S.id === 'mappings' ? 'Agent mappings' : env.name || env.id),
          h('code', {class: 'muted'}, env.id),
          h('span', {class: 'badge info'}, `revision ${env.revision}`),
          h('div', {class: 'm-grow'}),
          S.edit ? null :
                   h('button', {
                     type: 'button',
                     class: 'primary',
                     disabled: !writable(),
                     title: writable() ? 'Edit and apply' : 'cmr-ui is read-only',
                     onclick: () => S.ctx.navigate(`#/environments/${encodeURIComponent(S.id)}?edit=1`)
                   },
                     'Edit'),
          ),
      S.edit ? editorPanel(documentOf(yaml), `${S.id} revision ${env.revision}`) : yamlPanel(yaml),
      budget ? budgetPanel(budget, env.revision) : null,
  );
}

// ---- the overhead budget's removals ----

const NAMES_PER_REQUEST = 100;  // ids per GET /api/methods (the target stays short)

// id -> display name for the ids cmr-ingest knows (cmr.methods); the others stay ids. A
// failed lookup names nothing: the table shows ids.
async function methodNames(ids) {
  const names = new Map();
  const chunks = [];
  for (let i = 0; i < ids.length; i += NAMES_PER_REQUEST) chunks.push(ids.slice(i, i + NAMES_PER_REQUEST));
  await Promise.all(chunks.map(async (c) => {
    try {
      const r = await S.ctx.api.get('/api/methods', {ids: c.join(',')});
      for (const [id, name] of Object.entries(r.methods || {}))
        if (name) names.set(id, name);
    } catch (e) {
      // named by id
    }
  }));
  return names;
}

// What each JVM of the environment may spend on monitoring: its own setting, or the
// instrumenter's (instrumenter.budget.pct, which the page does not know).
function budgetSetting(b) {
  if (b.off) return 'off in this environment';
  return b.pct != null ? `${b.pct} % of each JVM's CPU` : 'cmr-instrumenter\'s default (instrumenter.budget.pct)';
}

function budgetPanel(b, revision) {
  const panel = h('div', {class: 'panel env-budget'});
  const render = () => {
    const sort = S.budgetSort;
    replace(
        panel,
        h('div', {class: 'm-panel-head'}, h('h2', null, 'Overhead budget'),
          h('span', {class: 'badge info', title: 'overhead_budget_pct in the environment\'s YAML'}, budgetSetting(b)),
          h('span', {class: 'muted'},
            b.in_force ? `${count(b.in_force)} method${b.in_force === 1 ? '' : 's'} without probes in revision ${
                             revision}: their probes cost more than they measured` :
                         `no method lost its probes in revision ${revision}`,
            b.history ? ` · ${count(b.history)} removal${b.history === 1 ? '' : 's'} of older revisions` : '',
            b.shown < b.in_force + b.history ? ` · the first ${count(b.shown)} shown` : '')),
        b.removals.length ? sortTable({
          rows: b.removals,
          sort,
          onSort: (key, dir) => {
            S.budgetSort = {key, dir};
            render();
          },
          className: 'env-budget-table',
          columns: [
            {
              key: 'method',
              title: 'Method',
              sort: (r) => S.names.get(r.method_id) || r.method_id,
              get: (r) => S.names.has(r.method_id) ?
                  methodName(S.names.get(r.method_id), {withPackage: true}) :
                  h('code', {title: 'not in cmr-ingest\'s method table'}, r.method_id)
            },
            {key: 'calls', title: 'Calls', class: 'num', sort: (r) => r.calls, get: (r) => count(r.calls)},
            {
              key: 'self',
              title: 'Self time / call',
              class: 'num',
              sort: (r) => r.self_ns_per_call,
              get: (r) => ns(r.self_ns_per_call)
            },
            {
              key: 'cost',
              title: 'Cost, % of CPU',
              hint: 'what its probes and the agent\'s work for its calls cost, in % of the JVM\'s CPU time',
              class: 'num',
              sort: (r) => r.cost_pct,
              get: (r) => `${r.cost_pct.toFixed(r.cost_pct < 0.1 ? 3 : 1)} %`
            },
            {key: 'reason', title: 'Reason', get: (r) => h('span', {class: 'env-reason', title: r.reason}, r.reason)},
            {
              key: 'rev',
              title: 'Revision',
              class: 'num',
              sort: (r) => r.revision,
              get: (r) => r.in_force ?
                  h('span', {class: 'badge warn', title: 'in force'}, `${r.revision}`) :
                  h('span', {class: 'badge', title: 'an older revision: not in force'}, `${r.revision}`)
            },
            {
              key: 'when',
              title: 'Decided',
              sort: (r) => r.time_ms,
              get: (r) => h('span', {title: `${time(r.time_ms)} · from agent ${r.agent}`}, ago(r.time_ms))
            },
          ],
        }) :
                            null,
    );
  };
  render();
  return panel;
}

function backLink() {
  return h('div', {class: 'env-back'}, h('a', {href: '#/environments'}, '← Environments'));
}

function yamlPanel(yaml) {
  const lines = yaml.replace(/\n$/, '').split('\n');
  return h(
      'div',
      {class: 'panel env-yaml-panel'},
      h('div', {class: 'm-panel-head'}, h('h2', null, 'YAML'),
        h('span', {class: 'muted'}, `${lines.length} lines · read-only · as cmr-config show writes it`)),
      numbered(lines),
  );
}

function numbered(lines, mark = 0) {
  return h(
      'div',
      {class: 'env-code'},
      h('table', null,
        h('tbody', null,
          lines.map(
              (l, i) =>
                  h('tr', {class: i + 1 === mark ? 'env-mark' : null}, h('td', {class: 'env-ln'}, String(i + 1)),
                    h('td', {class: 'env-src'}, l || ' '))))),
  );
}

// The document `cmr-config apply` reads: an environment's YAML as shown may lack the
// top-level "version: 1" / "environments:" keys; they are added.
function documentOf(yaml) {
  if (/^version:/m.test(yaml)) return yaml.endsWith('\n') ? yaml : `${yaml}\n`;
  if (S.id === 'mappings') return `version: 1\nenvironments: []\n${yaml.replace(/\n?$/, '\n')}`;
  if (/^environments:/m.test(yaml)) return `version: 1\n${yaml.replace(/\n?$/, '\n')}`;
  return `version: 1\nenvironments:\n${yaml.replace(/\n?$/, '\n')}`;
}

// ---- the editor ----

function editorPanel(base, baseName) {
  const p = S.parts;
  S.base = base;
  p.text =
      h('textarea',
        {class: 'env-text', spellcheck: 'false', rows: 24, oninput: scheduleDiff, 'aria-label': 'YAML to apply'});
  p.text.value = base;
  p.diff = h('div', {class: 'env-diff'});
  p.result = h('div', {class: 'env-result'});
  p.check = h('button', {type: 'button', onclick: () => run('plan')}, 'Check');
  p.apply =
      h('button', {type: 'button', class: 'primary', disabled: !writable(), onclick: () => run('apply')}, 'Apply…');
  const cancel =
      h('a', {class: 'button', href: S.id ? `#/environments/${encodeURIComponent(S.id)}` : '#/environments'}, 'Cancel');
  const panel = h(
      'div',
      {class: 'panel env-editor'},
      h('div', {class: 'm-panel-head'}, h('h2', null, 'Edit and apply'),
        h('span', {class: 'muted'},
          `the whole file as cmr-config apply reads it (version: 1, environments: [...], mappings: [...]) · based on ${
              baseName}`)),
      h(
          'p',
          {class: 'env-help muted'},
          'Environments in the CMR but not in this file are left alone. A "mappings:" key replaces the whole mapping table; without it the table is not touched. ',
          h('strong', null, 'Apply is atomic: '),
          'every change is published in one transaction, or none is.',
          ),
      h('div', {class: 'env-edit-grid'},
        h('div', {class: 'env-edit-col'}, h('div', {class: 'env-col-title'}, 'New text'), p.text),
        h('div', {class: 'env-edit-col'}, h('div', {class: 'env-col-title'}, 'Changes against ', baseName), p.diff)),
      h('div', {class: 'env-buttons'}, p.check, p.apply, cancel,
        writable() ? null : h('span', {class: 'muted'}, 'cmr-ui is read-only: applying is off')),
      p.result,
  );
  renderDiff();
  return panel;
}

function scheduleDiff() {
  clearTimeout(S.diffTimer);
  S.diffTimer = setTimeout(() => S && renderDiff(), 200);
}

function renderDiff() {
  const d = diffLines(S.base, S.parts.text.value);
  const st = stats(d);
  if (!st.added && !st.removed) return replace(S.parts.diff, h('div', {class: 'muted env-nodiff'}, 'No changes yet.'));
  const rows = [];
  for (const hk of hunks(d, 3)) {
    rows.push(h('tr', {class: 'env-hunk'}, h('td', {colspan: 3}, `@@ line ${hk.aStart} → ${hk.bStart}`)));
    for (const l of hk.lines)
      rows.push(
          h('tr', {class: `env-${l.op}`}, h('td', {class: 'env-ln'}, l.a ?? ''), h('td', {class: 'env-ln'}, l.b ?? ''),
            h('td', {class: 'env-src'},
              `${
                  l.op === 'add'     ? '+' :
                      l.op === 'del' ? '−' :
                                       ' '} ${l.text}`)));
  }
  replace(
      S.parts.diff,
      h('div', {class: 'env-diff-stats'}, h('span', {class: 'env-plus'}, `+${st.added}`), ' ',
        h('span', {class: 'env-minus'}, `−${st.removed}`), ' lines'),
      h('div', {class: 'env-code'}, h('table', null, h('tbody', null, rows))));
}

async function run(what) {
  const mine = S;  // a later mount replaces S: what this call awaited is then not for it
  const text = S.parts.text.value;
  if (what === 'apply') {
    const ok = await confirmDialog('Apply this file to the CMR?', 'Apply', {
      detail:
          'Every change is published in one transaction: either all of them reach the agents, or none does. Agents of a changed environment get its new revision and are instrumented again.',
    });
    if (!ok || !S) return;
  }
  setBusy(true, what);
  let r;
  let err = null;
  try {
    r = await S.ctx.api.post(`/api/environments/${what}`, text);
  } catch (e) {
    err = e;
    r = e.body;
  }
  if (S !== mine) return;
  setBusy(false);
  showOutcome(what, r, err);
  if (what === 'apply' && r && r.ok) afterApply();
}

function setBusy(on, what) {
  S.parts.check.disabled = on;
  S.parts.apply.disabled = on || !writable();
  if (on) replace(S.parts.result, notice('loading', what === 'apply' ? 'Applying…' : 'Checking…'));
}

// The answer of /api/environments/plan|apply: {ok, applied, output, error}; 422 when the
// document was refused (nothing sent), 503 when the cluster failed (the output and error
// say what was or was not published).
function showOutcome(what, r, err) {
  const ok = r && r.ok && !err;
  const output = (r && r.output) || '';
  const nothing = /^no changes\s*$/.test(output);
  const title = ok ?
      (what === 'apply' ? (nothing ? 'Nothing to change.' : 'Applied: every change was published in one transaction.') :
           nothing      ? 'Valid; applying would change nothing.' :
                          'Valid; applying would make these changes:') :
      err && err.status === 422 ? (what === 'apply' ? 'Not applied: the document was refused, nothing was sent.' :
                                                      'This document would be refused.') :
                                  'The cluster did not take it: see below what was and was not published.';
  replace(
      S.parts.result,
      h('div', {class: ok ? 'm-ok-box' : 'm-error-box'}, h('strong', null, title)),
      err && !(r && (r.output || r.error)) ? errorLine(err.message) : null,
      output && !nothing ? h('div', null, h('div', {class: 'env-col-title'}, 'Changes'), outputBlock(output)) : null,
      r && r.error ? h('div', null, h('div', {class: 'env-col-title'}, 'Why'), outputBlock(r.error)) : null,
  );
}

// The output, with "file:LINE:" references as buttons that put the caret on that line.
function outputBlock(text) {
  return h('pre', {class: 'env-output'}, text.split('\n').map((l) => outputLine(l)));
}

function outputLine(l) {
  const m = l.match(/^(.*?:)(\d+)(:.*)$/);
  if (!m) return `${l}\n`;
  return h(
      'span', null, m[1],
      h('button', {type: 'button', class: 'env-goto', title: 'Go to this line', onclick: () => gotoLine(Number(m[2]))},
        m[2]),
      `${m[3]}\n`);
}

function errorLine(msg) {
  return h('pre', {class: 'env-output'}, outputLine(msg));
}

function gotoLine(n) {
  const ta = S.parts.text;
  const lines = ta.value.split('\n');
  const start = lines.slice(0, n - 1).reduce((s, l) => s + l.length + 1, 0);
  const end = start + (lines[n - 1] || '').length;
  ta.focus();
  ta.setSelectionRange(start, end);
  const lh = parseFloat(getComputedStyle(ta).lineHeight) || 16;
  ta.scrollTop = Math.max(0, (n - 5) * lh);
}

// After a successful apply the new text is the base, and the header shows the new revision.
async function afterApply() {
  const mine = S;  // a later mount replaces S: what this call awaited is then not for it
  S.ctx.toast('Applied.', 'good');
  S.base = S.parts.text.value;
  renderDiff();
  if (!S.id) return;
  try {
    const env = await S.ctx.api.get(`/api/environments/${encodeURIComponent(S.id)}`);
    if (S !== mine) return;
    const badge = S.el.querySelector('.m-head .badge');
    if (badge) badge.textContent = `revision ${env.revision}`;
  } catch (e) {
    console.warn('reload', e);
  }
}
