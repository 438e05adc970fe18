// views/flame.js - the flame graph of many traces (#/flame?ids=a,b,c): fetches the traces
// (at most 200, four at a time, with a progress line), merges their call trees by call path
// (the same sequence of methods from the root is one frame: totals, self times and calls
// summed) and shows the merged tree with js/lib/flamegraph.js, plus the traces merged and
// those that could not be read.

import {mergeFrameTrees} from '../lib/calltree.js';
import {clear, h, notice, table} from '../lib/dom.js';
import {FlameGraph} from '../lib/flamegraph.js';
import * as fmt from '../lib/format.js';
import {completenessBadge} from '../lib/loss.js';

import {flameToolbar, showZoom} from './trace.js';

const MAX_TRACES = 200;
const PARALLEL = 4;
const ID = /^[0-9a-fA-F]{32}$/;

let view = null;

export default {
  route: 'flame',
  title: 'Flame graph',
  nav: false,
  navRoute: 'traces',
  async mount(el, params, ctx) {
    view = new FlameView(el, params.query, ctx);
    await view.start();
  },
  unmount() {
    if (view) view.destroy();
    view = null;
  },
};

// The ids of the query, de-duplicated, at most MAX_TRACES; malformed ones are reported.
function parseIds(query) {
  const raw = (query.get('ids') || '').split(',').map((s) => s.trim()).filter(Boolean);
  const ids = [...new Set(raw)];
  return {
    ids: ids.filter((s) => ID.test(s)).slice(0, MAX_TRACES),
    bad: ids.filter((s) => !ID.test(s)),
    over: Math.max(0, ids.filter((s) => ID.test(s)).length - MAX_TRACES)
  };
}

class FlameView {
  constructor(el, query, ctx) {
    this.el = el;
    this.ctx = ctx;
    this.req = parseIds(query);
    this.abort = new AbortController();
    this.traces = [];
    this.failed = this.req.bad.map((id) => ({id, error: 'not a trace id'}));
    this.fg = null;
  }

  destroy() {
    this.abort.abort();
    if (this.fg) this.fg.destroy();
  }

  async start() {
    this.render();
    if (!this.req.ids.length) {
      this.showProgress(null);
      this.graphPanel.append(
          notice('empty', 'No traces chosen: check some rows of the trace list and press "Flame graph of N traces".'));
      this.renderLists();
      return;
    }
    await this.fetchAll();
    if (this.abort.signal.aborted) return;
    this.showGraph();
    this.renderLists();
  }

  render() {
    this.progressText = h('span');
    this.progressBar = h('span');
    this.progress = h('div', {class: 'fl-progress'}, h('div', {class: 'fl-bar'}, this.progressBar), this.progressText);
    this.summary = h('span', {class: 'muted'});
    this.graphPanel = h('section', {class: 'panel tr-panel fl-graph'});
    this.lists = h('div', {class: 'fl-lists'});
    const note = this.req.over ?
        h('span', {class: 'badge warn'}, `only the first ${MAX_TRACES} of ${MAX_TRACES + this.req.over} traces`) :
        null;
    this.el.append(
        h(
            'div',
            {class: 'fl-page'},
            h('section', {class: 'panel fl-head'}, h('a', {href: '#/traces', class: 'tr-back'}, '← Traces'),
              h('h1', null, 'Flame graph'), this.summary, note, h('span', {class: 'tl-grow'}), this.progress),
            this.graphPanel,
            this.lists,
            ),
    );
  }

  showProgress(done) {
    const total = this.req.ids.length;
    if (done === null) {
      this.progress.hidden = true;
      return;
    }
    this.progressBar.style.width = `${total ? (100 * done) / total : 100}%`;
    const failed = this.failed.length - this.req.bad.length;
    this.progressText.textContent = `${done === total ? 'Read' : 'Reading'} ${fmt.count(done)} of ${
        fmt.count(total)} traces${failed ? `, ${failed} failed` : ''}`;
  }

  // Fetches the traces PARALLEL at a time, in the order given.
  async fetchAll() {
    const ids = this.req.ids;
    const results = new Array(ids.length);
    let next = 0;
    let done = 0;
    this.showProgress(0);
    const worker = async () => {
      while (next < ids.length && !this.abort.signal.aborted) {
        const k = next++;
        results[k] = await this.fetchOne(ids[k]);
        done++;
        this.showProgress(done);
      }
    };
    await Promise.all(Array.from({length: Math.min(PARALLEL, ids.length)}, worker));
    for (const r of results)
      if (r && r.trace) this.traces.push(r.trace);
  }

  async fetchOne(id) {
    try {
      const trace = await this.ctx.api.get(`/api/traces/${id}`, null, {signal: this.abort.signal});
      return {trace};
    } catch (e) {
      if (e.name !== 'AbortError')
        this.failed.push({id, error: e.status === 404 ? 'not found (removed by retention?)' : e.message});
      return null;
    }
  }

  showGraph() {
    const n = this.traces.length;
    if (!n) {
      this.graphPanel.append(notice('error', 'None of the traces could be read.'));
      return;
    }
    const merged = mergeFrameTrees(this.traces);
    const total = this.traces.reduce((s, t) => s + (t.duration_ns || 0), 0);
    this.summary.textContent =
        `${fmt.count(n)} trace${n === 1 ? '' : 's'} merged · ${fmt.ns(total)} in all · ${fmt.ns(total / n)} on average`;
    this.graphPanel.append(flameToolbar(
        this,
        'Frames: the same call path in every trace · width: total time · dark strip: self time · colour: package'));
    const box = h('div', {class: 'tr-canvasbox'});
    this.graphPanel.append(box);
    this.fg = new FlameGraph(box, {onZoom: (f) => showZoom(this.zoomLabel, f)});
    this.fg.setTree(merged);
  }

  renderLists() {
    clear(this.lists);
    if (this.traces.length) {
      const rows = this.traces.slice().sort((a, b) => b.duration_ns - a.duration_ns);
      this.lists.append(
          h(
              'section',
              {class: 'panel'},
              h('h2', null, `Merged (${fmt.count(rows.length)})`),
              table(
                  [
                    {
                      title: 'Trace',
                      get: (t) => h('a', {href: `#/trace/${t.trace_id}`, class: 'mono'}, fmt.shortId(t.trace_id))
                    },
                    {title: 'Start', get: (t) => fmt.time(t.start_ns), class: 'mono'},
                    {title: 'Duration', get: (t) => fmt.ns(t.duration_ns), class: 'num'},
                    {title: 'Root', get: (t) => rootName(t)},
                    {title: 'State', get: (t) => completenessBadge(t)},
                  ],
                  rows,
                  ),
              ),
      );
    }
    if (this.failed.length) {
      this.lists.append(
          h(
              'section',
              {class: 'panel'},
              h('h2', null, `Not merged (${fmt.count(this.failed.length)})`),
              table(
                  [
                    {title: 'Trace', get: (f) => h('span', {class: 'mono'}, f.id)},
                    {title: 'Why', get: (f) => h('span', {class: 'muted'}, f.error)},
                  ],
                  this.failed,
                  ),
              ),
      );
    }
  }
}

function rootName(t) {
  const root = (t.roots || [])[0];
  const m = fmt.method(root ? root.method : '');
  const http = t.http && (t.http.method || t.http.path) ? `${t.http.method || ''} ${t.http.path || ''} ` : '';
  return h('span', {title: root ? root.method : ''}, http, m.short || '—');
}
