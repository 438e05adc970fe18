// views/agents.js - '#/agents': every JVM cmr-ingest has heard of (GET /api/agents, the
// latest AgentStatus of each): state, environment and revision, classes, events and drops,
// redefinition failures, commands, failed messages, when it was last heard of, and the
// diagnoses it took part in. Reloaded every 5 s while open. Clicking a JVM opens its
// history of the last 24 hours (GET /api/agents/<id>?from=-24h) below the list.
//
// Hash query: q (filter on name, id, environment, state), agent (the open JVM).
import {clear, h, notice} from '../lib/dom.js';
import {ago, count, shortId, time} from '../lib/format.js';
import {errorText, field, pct, poller, replace, sortTable, stateBadge} from '../lib/m-common.js';

let S = null;

export default {
  route: 'agents',
  title: 'Agents',
  nav: true,
  mount(el, params, ctx) {
    S = {
      el,
      ctx,
      filter: params.query.get('q') || '',
      open: params.query.get('agent') || '',
      sort: params.query.get('sort') ?
          {key: params.query.get('sort'), dir: params.query.get('dir') === 'asc' ? 'asc' : 'desc'} :
          null,
      agents: null,
      error: null,
      loadedAt: 0,
      parts: {},
    };
    renderFrame();
    S.poll = poller(loadAgents, 5000);
    if (S.open) loadHistory(S.open);
  },
  unmount() {
    if (!S) return;
    S.poll.stop();
    S = null;
  },
};

function saveQuery() {
  S.ctx.setQuery({q: S.filter, agent: S.open, sort: S.sort ? S.sort.key : '', dir: S.sort ? S.sort.dir : ''});
}

function renderFrame() {
  const p = S.parts;
  p.summary = h('span', {class: 'muted m-sub'});
  p.list = h('div', {class: 'panel ag-list'}, notice('loading', 'Loading…'));
  p.detail = h('div', {class: 'ag-detail'});
  const filter = h('input', {
    type: 'search',
    placeholder: 'name, id, environment, state…',
    value: S.filter,
    oninput: (e) => onFilter(e.target.value)
  });
  clear(S.el).append(
      h('div', {class: 'm-head'}, h('h1', null, 'Agents'), p.summary),
      h(
          'div',
          {class: 'm-toolbar'},
          field('Filter', filter),
          h('div', {class: 'm-grow'}),
          h('span', {class: 'muted ag-live'}, h('span', {class: 'ag-dot'}), 'live · every 5 s'),
          ),
      p.list,
      p.detail,
  );
}

function onFilter(v) {
  S.filter = v;
  saveQuery();
  renderList();
}

async function loadAgents() {
  const mine = S;  // a later mount replaces S: what this call awaited is then not for it
  try {
    const r = await S.ctx.api.get('/api/agents');
    if (S !== mine) return;
    S.agents = r.agents || [];
    S.error = null;
  } catch (e) {
    if (S !== mine) return;
    S.error = e;
  }
  S.loadedAt = Date.now();
  renderList();
}

// ---- the list ----

function matches(a, f) {
  if (!f) return true;
  const hay = `${a.name} ${a.agent} ${a.environment} ${a.state}`.toLowerCase();
  return f.toLowerCase().split(/\s+/).filter(Boolean).every((w) => hay.includes(w));
}

function renderList() {
  if (S.error && !S.agents)
    return replace(S.parts.list, notice('error', `Could not load the agents: ${errorText(S.error)}`));
  if (!S.agents) return;
  const rows = S.agents.filter((a) => matches(a, S.filter.trim()));
  renderSummary();
  const t = sortTable({
    columns: columns(),
    rows,
    sort: S.sort,
    onSort: (key, dir) => {
      S.sort = {key, dir};
      saveQuery();
      renderList();
    },
    rowAttrs: (a) => ({
      class: `m-click${a.agent === S.open ? ' m-selected' : ''}`,
      onclick: (e) => !e.target.closest('a') && toggle(a.agent)
    }),
    empty: S.agents.length ? 'No agent matches the filter.' : 'No agent has reported yet.',
  });
  replace(
      S.parts.list,
      S.error ? h('div', {class: 'm-error-box'}, `Refresh failed: ${errorText(S.error)} (showing the last answer)`) :
                null,
      h('div', {class: 'm-scroll'}, t));
}

function renderSummary() {
  const by = {};
  for (const a of S.agents) by[a.state] = (by[a.state] || 0) + 1;
  const parts = Object.entries(by).map(([s, n]) => `${n} ${s.toLowerCase()}`);
  S.parts.summary.textContent =
      `${S.agents.length} JVM${S.agents.length === 1 ? '' : 's'}${parts.length ? ` · ${parts.join(' · ')}` : ''}`;
}

function columns() {
  const num = (key, title, get, hint) => ({key, title, class: 'num', sort: get, get: (a) => count(get(a)), hint});
  return [
    {key: 'name', title: 'JVM', sort: (a) => a.name, get: nameCell},
    {key: 'state', title: 'State', sort: (a) => a.state, get: (a) => stateBadge(a.state)},
    {key: 'env', title: 'Environment', sort: (a) => a.environment, get: envCell},
    {
      key: 'classes',
      title: 'Classes',
      hint: 'instrumented / seen / sent to the CMR',
      class: 'num',
      sort: (a) => a.classes_instrumented,
      get: classesCell
    },
    {
      key: 'events',
      title: 'Events',
      class: 'num',
      sort: (a) => a.events_recorded,
      get: (a) => count(a.events_recorded)
    },
    {
      key: 'dropped',
      title: 'Dropped',
      class: 'num',
      sort: (a) => a.events_dropped,
      get: droppedCell,
      hint: 'events dropped (rings full, batches refused)'
    },
    {
      key: 'traces_dropped',
      title: 'Traces dropped',
      class: 'num',
      sort: (a) => a.traces_dropped || 0,
      get: (a) => warnIf(a.traces_dropped || 0),
      hint: 'traces (thread segments) not recorded at all: their root call found the thread\'s ring full'
    },
    {
      key: 'redef',
      title: 'Redef. fail.',
      class: 'num',
      sort: (a) => a.redefine_failures,
      get: (a) => warnIf(a.redefine_failures),
      hint: 'redefinitions the JVM refused'
    },
    {
      key: 'cmds',
      title: 'Commands',
      class: 'num',
      sort: (a) => a.commands_refused,
      get: commandsCell,
      hint: 'commands accepted / refused'
    },
    {
      key: 'msgs',
      title: 'Msgs failed',
      class: 'num',
      sort: (a) => a.messages_failed,
      get: (a) => warnIf(a.messages_failed),
      hint: 'messages the agent could not deliver'
    },
    {
      key: 'seen',
      title: 'Last seen',
      sort: (a) => a.time_ms,
      get: (a) => h('span', {title: time(a.time_ms)}, ago(a.time_ms))
    },
    {key: 'diag', title: 'Diagnoses', sort: (a) => (a.diagnoses || []).length, get: diagnosesCell},
  ];
}

function nameCell(a) {
  return h(
      'div', {class: 'ag-name'}, h('span', {class: 'ag-jvm'}, a.name || '(no name)'),
      h('code', {class: 'muted', title: a.agent}, a.agent));
}

function envCell(a) {
  if (!a.environment) return h('span', {class: 'm-warn'}, 'none');
  return h(
      'span', null, h('a', {href: `#/environments/${encodeURIComponent(a.environment)}`}, a.environment),
      h('span', {class: 'muted'}, ` rev ${a.revision}`));
}

function classesCell(a) {
  return h(
      'span', {
        title: `${count(a.classes_instrumented)} instrumented, ${count(a.classes_seen)} seen, ${
            count(a.classes_sent)} sent to the CMR`
      },
      h('strong', null, count(a.classes_instrumented)),
      h('span', {class: 'muted'}, ` / ${count(a.classes_seen)} / ${count(a.classes_sent)}`));
}

function droppedCell(a) {
  const d = a.events_dropped || 0;
  if (!d) return h('span', {class: 'muted'}, '0');
  const share = d / Math.max(1, d + (a.events_recorded || 0));
  return h(
      'span', {class: 'ag-dropped', title: `${pct(share, 3)} of the events were dropped`},
      `${count(d)} (${pct(share, 2)})`);
}

function warnIf(n) {
  return n ? h('span', {class: 'm-bad'}, count(n)) : h('span', {class: 'muted'}, '0');
}

function commandsCell(a) {
  return h(
      'span', null, count(a.commands_accepted), ' / ',
      a.commands_refused ? h('span', {class: 'm-bad'}, count(a.commands_refused)) : h('span', {class: 'muted'}, '0'));
}

function diagnosesCell(a) {
  const list = a.diagnoses || [];
  if (!list.length) return h('span', {class: 'muted'}, '—');
  return h(
      'div',
      {class: 'ag-diags'},
      list.map(
          (d) => h(
              'a',
              {class: 'ag-diag', href: `#/diagnoses/${d.id}`, title: diagTitle(d)},
              h('code', null, shortId(d.id)),
              h('span', {class: `badge ${d.state === 'active' ? 'good' : ''}`}, d.state),
              h('span', {class: 'muted ag-diag-stats'},
                `${count(d.hits)} hits · ${count(d.calls)} calls · ${overhead(d.overhead_pct)}`),
              ),
          ),
  );
}

function diagTitle(d) {
  return `diagnosis ${d.id}: ${d.state}${d.ended_by ? ` (ended by ${d.ended_by})` : ''}\nhits ${d.hits}, calls ${
      d.calls}, classes ${d.classes}\noverhead ${(d.overhead_pct || 0).toFixed(4)} %\nstarted ${time(d.started_ms)}${
      d.ended_ms ? `, ended ${time(d.ended_ms)}` : ''}`;
}

// The agent's estimate of a diagnosis' overhead, a percentage of the anchor's time.
function overhead(p) {
  if (!p) return '0 % overhead';
  return `${p >= 1 ? p.toFixed(1) : p.toPrecision(2)} % overhead`;
}

// ---- one JVM's history ----

function toggle(id) {
  S.open = S.open === id ? '' : id;
  saveQuery();
  renderList();
  if (S.open)
    loadHistory(S.open);
  else
    replace(S.parts.detail);
}

async function loadHistory(id) {
  const mine = S;  // a later mount replaces S: what this call awaited is then not for it
  const a = (S.agents || []).find((x) => x.agent === id);
  const box = h('div', {class: 'panel'}, historyHead(id, a), notice('loading', 'Loading the history…'));
  replace(S.parts.detail, box);
  let r;
  try {
    r = await S.ctx.api.get(`/api/agents/${encodeURIComponent(id)}`, {from: '-24h'});
  } catch (e) {
    if (S && S.open === id)
      replace(box, historyHead(id, a), notice('error', `Could not load the history: ${errorText(e)}`));
    return;
  }
  if (S !== mine || S.open !== id) return;
  const rows = (r.history || []).slice().reverse();
  replace(box, historyHead(id, a || rows[0]), historyTable(rows));
  box.scrollIntoView({behavior: 'smooth', block: 'nearest'});
}

function historyHead(id, a) {
  return h(
      'div',
      {class: 'm-panel-head'},
      h('h2', null, a ? a.name : id),
      h('code', {class: 'muted'}, id),
      h('span', {class: 'muted'},
        '· status history, last 24 hours (one per change of state, at most one a minute otherwise), newest first'),
      h('div', {class: 'm-grow'}),
      h('button', {type: 'button', class: 'm-close', title: 'Close', onclick: () => toggle(id)}, '×'),
  );
}

function historyTable(rows) {
  const num = (title, get) => ({title, class: 'num', get: (s) => count(get(s))});
  return sortTable({
    className: 'm-compact',
    rows,
    empty: 'No status in the last 24 hours.',
    columns: [
      {title: 'Time', get: (s) => h('span', {title: ago(s.time_ms)}, time(s.time_ms))},
      {title: 'State', get: (s) => stateBadge(s.state)},
      {title: 'Env / rev', get: (s) => `${s.environment || '—'} / ${s.revision}`},
      num('Instrumented', (s) => s.classes_instrumented),
      num('Seen', (s) => s.classes_seen),
      num('Sent', (s) => s.classes_sent),
      num('Events', (s) => s.events_recorded),
      {title: 'Dropped', class: 'num', get: droppedCell},
      {title: 'Traces dropped', class: 'num', get: (s) => warnIf(s.traces_dropped || 0)},
      {title: 'Redefine fail.', class: 'num', get: (s) => warnIf(s.redefine_failures)},
      {title: 'Cmds ok / refused', class: 'num', get: commandsCell},
      {title: 'Msgs failed', class: 'num', get: (s) => warnIf(s.messages_failed)},
      {title: 'Diagnoses', get: diagnosesCell},
    ],
  });
}
