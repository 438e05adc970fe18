// app.js - the shell: top bar, hash router, status line and toasts. Each view is a module of
// js/views/ that exports default { route, title, nav, mount(el, params, ctx), unmount() }:
//
//   route   the first path segment it answers: '#/traces?...' -> 'traces'
//   nav     shown in the top bar when true
//   mount   renders into el; params = { path: ['trace', ID], query: URLSearchParams };
//           ctx = { api, navigate(hash), toast(text, kind), setQuery(obj) }
//   unmount frees what mount started (timers, listeners, charts); called before the next
//           view mounts
//
// The URL hash is the state: a view that changes its filters calls ctx.setQuery so a reload
// or a shared link shows the same thing.
import {api} from './api.js';
import {clear, h, notice} from './lib/dom.js';
import agents from './views/agents.js';
import diagnoses from './views/diagnoses.js';
import environments from './views/environments.js';
import flame from './views/flame.js';
import metrics from './views/metrics.js';
import trace from './views/trace.js';
import traces from './views/traces.js';

const views = [traces, trace, flame, metrics, agents, environments, diagnoses];
const byRoute = new Map(views.map((v) => [v.route, v]));
let current = null;
let mountId = 0;

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, '');
  const q = raw.indexOf('?');
  const pathPart = q >= 0 ? raw.slice(0, q) : raw;
  const path = pathPart.split('/').filter(Boolean).map(decodeURIComponent);
  return {path, query: new URLSearchParams(q >= 0 ? raw.slice(q + 1) : '')};
}

function navigate(hash) {
  if (location.hash === hash)
    route();
  else
    location.hash = hash;
}

// Replaces the hash's query without mounting the view again.
function setQuery(obj) {
  const {path} = parseHash();
  const qs = new URLSearchParams();
  for (const [k, v] of Object.entries(obj))
    if (v !== undefined && v !== null && v !== '') qs.set(k, String(v));
  const s = qs.toString();
  history.replaceState(null, '', `#/${path.map(encodeURIComponent).join('/')}${s ? `?${s}` : ''}`);
}

function toast(text, kind = 'info') {
  const t = h('div', {class: `toast ${kind}`, role: kind === 'error' ? 'alert' : 'status'}, text);
  document.getElementById('toasts').append(t);
  setTimeout(() => t.remove(), kind === 'error' ? 8000 : 4000);
}

const ctx = {
  api,
  navigate,
  toast,
  setQuery
};

function renderNav(active) {
  const nav = clear(document.getElementById('nav'));
  for (const v of views)
    if (v.nav) nav.append(h('a', {href: `#/${v.route}`, class: v.route === active ? 'active' : null}, v.title));
}

async function route() {
  const params = parseHash();
  if (!params.path.length) {
    location.replace('#/traces');
    return;
  }
  const view = byRoute.get(params.path[0]);
  if (current && current.unmount) {
    try {
      current.unmount();
    } catch (e) {
      console.warn('unmount', e);
    }
  }
  current = view || null;
  const el = clear(document.getElementById('view'));
  renderNav(view ? view.navRoute || view.route : null);
  if (!view) {
    el.append(notice('error', `No page "${params.path[0]}".`));
    document.title = 'cmr';
    return;
  }
  document.title = `${view.title} · cmr`;
  const id = ++mountId;
  try {
    await view.mount(el, params, ctx);
  } catch (e) {
    if (id === mountId) {
      clear(el).append(notice('error', `Could not show ${view.title}: ${e.message}`));
      console.warn(view.route, e);
    }
  }
}

async function status() {
  const el = document.getElementById('status');
  try {
    const s = await api.get('/api/session');
    el.textContent = s.ingest && s.ingest.ok ? '● connected' : '● cmr-ingest unreachable';
    el.className = `status ${s.ingest && s.ingest.ok ? 'ok' : 'bad'}`;
    el.title = `cmr-ui ${s.version || ''}; cmr-ingest ${s.ingest ? s.ingest.url : ''}; writes ${
        s.writable ? 'allowed' : 'off'}`;
    ctx.session = s;
  } catch (e) {
    el.textContent = '● cmr-ui unreachable';
    el.className = 'status bad';
  }
}

window.addEventListener('hashchange', route);
status().then(route);
setInterval(status, 10000);
