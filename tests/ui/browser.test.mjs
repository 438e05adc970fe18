// browser.test.mjs - the web UI in Debian's chromium (headless, playwright-core), against a
// running cmr-ui on the real stack (tests/ui/run_browser.sh starts it): each view loads and
// shows what the API answers, a click on a trace opens its tree, the trace's waterfall and
// flame graph draw, a diagnosis is started from the page, a discovered method is unticked
// and the diagnosis stopped, and the console has no errors and no request failed.
//
//   node browser.test.mjs UI_URL CHROMIUM [SCREENSHOT_DIR]
import fs from 'node:fs';
import path from 'node:path';

import {chromium} from '../../cmr-ui/web/node_modules/playwright-core/index.mjs';

const [base, executablePath, shots] = process.argv.slice(2);
const failures = [];
const problems = [];  // console errors, page errors, failed requests
let step = '';
const t0 = Date.now();
const say = (what) => console.log(`${((Date.now() - t0) / 1000).toFixed(1)}s ${what}`);

function fail(what) {
  failures.push(`${step}: ${what}`);
  console.log(`  FAIL ${what}`);
}
function check(cond, what) {
  if (!cond) fail(what);
  return cond;
}
async function api(p) {
  const r = await fetch(new URL(p, base));
  if (!r.ok) throw new Error(`${p}: ${r.status} ${await r.text()}`);
  return r.json();
}
async function eventually(what, fn, timeoutMs = 30000) {
  const end = Date.now() + timeoutMs;
  let last;
  while (Date.now() < end) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    await new Promise((r) => setTimeout(r, 300));
  }
  fail(`${what} (not within ${timeoutMs} ms${last instanceof Error ? `: ${last.message}` : ''})`);
  return null;
}
const shortName = (m) => {
  const head = m.split('(')[0];
  const parts = head.split('.');
  return parts.slice(-2).join('.');
};
async function shot(page, name) {
  if (!shots) return;
  fs.mkdirSync(shots, {recursive: true});
  await page.screenshot({path: path.join(shots, `${name}.png`)});
}
async function visit(page, hash) {
  await page.goto(new URL(`/${hash}`, base).href);
}

const browser = await chromium.launch({
  executablePath,
  args: [
    '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync',
    '--no-first-run', '--disable-quic'
  ],
});
const page = await browser.newPage({viewport: {width: 1400, height: 900}});
page.setDefaultTimeout(45000);  // a loaded 2-core machine answers slowly, not wrongly
page.on('console', (m) => {
  if (m.type() === 'error') problems.push(`console (${step}): ${m.text()}`);
});
page.on('pageerror', (e) => problems.push(`page error (${step}): ${e.message}`));
page.on('requestfailed', (r) => problems.push(`request failed (${step}): ${r.url()} ${r.failure()?.errorText}`));
page.on('response', (r) => {
  if (r.status() >= 400) problems.push(`HTTP ${r.status()} (${step}): ${r.url()}`);
});

try {
  // ---- traces: the list shows as many traces as the API has, a click opens the tree
  step = 'traces';
  say(step);
  const list = await api('/api/traces?limit=1000');
  check(list.traces.length > 0, 'the API has traces');
  // traces that ended a few seconds ago: complete, across both JVMs
  await visit(page, `#/traces?to=${encodeURIComponent(new Date(Date.now() - 4000).toISOString())}`);
  await page.locator('.tl-row:not(.tl-head)').first().waitFor();
  const counts = await eventually('the count line', async () => {
    const t = await page.locator('.tl-counts').textContent();
    return /\d/.test(t) ? t : null;
  });
  const shown = Number((counts || '').replace(/,/g, '').match(/(\d+) traces?/)?.[1]);
  // the page asked for its own window; the API answered at least as many in ours
  check(shown > 0 && shown <= 1000, `the count line names the traces (${counts})`);
  await shot(page, 'traces');
  // every row's state badge says what completeness() says of its trace now
  const badges = await page.locator('.tl-row:not(.tl-head) .badge:is(.good, .info, .warn)').allTextContents();
  check(badges.some((b) => b === 'complete'), `the rows carry state badges (${badges.slice(0, 3)})`);
  // completeness: a trace not complete yet is "arriving" for 30 s after its last event,
  // then "partial" (the module, in the browser)
  const states = await page.evaluate(async () => {
    const {completeness} = await import('/js/lib/loss.js');
    const now = Date.now(), ns = (ms) => ms * 1e6;
    return [
      completeness({complete: true, start_ns: ns(now - 100000), duration_ns: 0}, now),
      completeness({complete: false, start_ns: ns(now - 5000), duration_ns: ns(2000)}, now),
      completeness({complete: false, start_ns: ns(now - 40000), duration_ns: ns(5000)}, now),
      completeness({complete: false, start_ns: ns(now - 40000), duration_ns: ns(15000)}, now),
    ];
  });
  check(
      JSON.stringify(states) === JSON.stringify(['complete', 'arriving', 'partial', 'arriving']),
      `complete / arriving / partial by the trace's last event (${states})`);
  await page.locator('.tl-row:not(.tl-head)').first().click();
  await page.waitForURL(/#\/trace\/[0-9a-f]{32}/);
  const id = page.url().match(/#\/trace\/([0-9a-f]{32})/)[1];
  const tree = await api(`/api/traces/${id}`);
  step = 'trace';
  say(step);
  const root = tree.roots[0];
  await page.locator('.tr-row', {hasText: shortName(root.method).split('.').pop()}).first().waitFor();
  check((await page.locator('body').textContent()).includes(id), 'the trace id is on the page');
  await shot(page, 'trace');
  for (const [tab, name] of [['Waterfall', 'trace-waterfall'], ['Flame graph', 'trace-flame']]) {
    await page.getByRole('tab', {name: tab}).click();
    const canvas = page.locator('canvas:visible').first();
    await canvas.waitFor();
    const box = await canvas.boundingBox();
    check(box && box.width > 200 && box.height > 20, `${tab} draws a canvas (${JSON.stringify(box)})`);
    await shot(page, name);
  }

  // ---- a call's own data: the payment service's JDBC call shows its SQL (literals
  // masked) next to the method, and the tree's search finds it by its SQL
  step = 'sql';
  say(step);
  let sqlTrace = null;
  for (const t of list.traces.filter((x) => x.complete && x.jvms === 2).slice(0, 20)) {
    const full = await api(`/api/traces/${t.trace_id}`);
    const walk = (n) => (n.attributes && n.attributes['db.statement']) || (n.children || []).map(walk).find((x) => x);
    const sql = full.roots.map(walk).find((x) => x);
    if (sql) {
      sqlTrace = {id: t.trace_id, sql};
      break;
    }
  }
  check(sqlTrace !== null, 'a checkout trace has a JDBC call with its SQL');
  if (sqlTrace) {
    check(
        sqlTrace.sql === 'insert into payments(order_id, amount, approved) values (?, ?, ?)',
        `the SQL is masked (${sqlTrace.sql})`);
    await visit(page, `#/trace/${sqlTrace.id}`);
    await page.getByPlaceholder('Find a method, SQL or URL…').fill('insert into payments');
    const row = page.locator('.tr-row', {hasText: 'insert into payments'}).first();
    await row.waitFor();
    check(
        (await row.locator('.tr-attr').textContent()).startsWith('insert into payments'), 'the JDBC row shows its SQL');
    await row.click();
    check(
        (await page.locator('.tr-detail').textContent()).includes(sqlTrace.sql),
        'the selected JDBC call\'s SQL is shown in full');
    check(
        (await page.locator('.tr-detail').textContent()).includes(`${sqlTrace.sql} → 1 row`),
        'the insert shows the row it added');
    await shot(page, 'trace-sql');
  }

  // ---- metrics: the top transaction of the API is in the table
  step = 'metrics';
  say(step);
  const top = await api('/api/metrics/top?env=demo&kind=transaction&last=1h');
  check(top.items.length > 0, 'the API ranks transactions');
  await visit(page, '#/metrics?env=demo&kind=transaction');
  const first = shortName(top.items[0].name).split('.').pop();
  await page.locator('table', {hasText: first}).first().waitFor();
  // the stack has run for minutes, not the hour asked for: the rate is per second of them
  const t0 = top.items[0];
  check(
      t0.rate_seconds >= 10 && t0.rate_seconds < 3000 &&
          Math.abs(t0.rate * t0.rate_seconds - t0.count) < 1e-3 * t0.count,
      `the rate is per second of the reports, not of the hour: ${t0.count} calls, ${t0.rate}/s over ${
          t0.rate_seconds} s`);
  const hover = await page.locator('td.num span[title*="calls over"]').first().getAttribute('title');
  check(/ of reports in the window$/.test(hover), `the rate says over how long: ${hover}`);
  // the charts' time axis reads as the UI's times do: 24-hour, seconds only when the ticks
  // are less than a minute apart, the date where the day changes (the module, in the page)
  const ticks = await page.evaluate(async () => {
    const {timeTicks} = await import('/js/lib/m-chart.js');
    const at = (y, mo, d, h, mi, s = 0) => new Date(y, mo - 1, d, h, mi, s).getTime() / 1000;
    return [
      timeTicks(null, [at(2026, 11, 29, 23, 59, 30), at(2026, 11, 30, 0, 0, 0)], 0, 0, 30),
      timeTicks(null, [at(2026, 11, 29, 13, 0), at(2026, 11, 29, 14, 0)], 0, 0, 3600),
      timeTicks(null, [at(2026, 11, 29, 0, 0), at(2026, 11, 30, 0, 0)], 0, 0, 86400),
      timeTicks(null, [at(2026, 11, 29, 13, 0, 5), at(2026, 11, 29, 13, 0, 5) + 0.5], 0, 0, 0.5),
    ];
  });
  check(
      JSON.stringify(ticks) === JSON.stringify([
        ['23:59:30', '11-30 00:00'], ['13:00', '14:00'], ['2026-11-29', '2026-11-30'], ['13:00:05.000', '13:00:05.500']
      ]),
      `time axis labels (${JSON.stringify(ticks)})`);
  await shot(page, 'metrics');

  // ---- an answer of several ingest workers that lacks partitions (one did not answer):
  // the real answers with what the fan-out adds then (docs/INGEST.md), passed through the
  // page's requests; both views say what is missing
  step = 'partial';
  say(step);
  const partial = {
    partial: true,
    partitions_unreachable: [7, 3],
    errors: [{url: 'http://10.0.0.9:8470', error: 'timed out'}]
  };
  const widen = async (route) => {
    const r = await route.fetch();
    await route.fulfill({response: r, json: {...(await r.json()), ...partial}});
  };
  await page.route(/\/api\/metrics\/top\?/, widen);
  await page.route(/\/api\/traces\?/, widen);
  await visit(page, '#/metrics?env=demo&kind=transaction&last=1h');
  const note = await page.locator('.partial-note').first().textContent();
  check(/partitions 3, 7 did not answer/.test(note) && /timed out/.test(note), `the metrics view says so: ${note}`);
  await page.locator('table', {hasText: first}).first().waitFor(); /* and shows what it has */
  await visit(page, '#/traces');
  const tnote = await page.locator('.tl-partial .partial-note').textContent();
  check(/partitions 3, 7 did not answer/.test(tnote), `the traces view says so: ${tnote}`);
  await shot(page, 'partial');
  await page.unroute(/\/api\/metrics\/top\?/);
  await page.unroute(/\/api\/traces\?/);

  // ---- agents: both JVMs
  step = 'agents';
  say(step);
  const agents = (await api('/api/agents')).agents;
  check(agents.length >= 2, `the API knows both JVMs (${agents.length})`);
  await visit(page, '#/agents');
  for (const a of agents) await page.getByText(a.name, {exact: false}).first().waitFor();
  await shot(page, 'agents');

  // ---- environments: the list and one environment's YAML
  step = 'environments';
  say(step);
  await visit(page, '#/environments');
  await page.getByText('Demo shop').first().waitFor();
  await page.getByRole('columnheader', {name: 'Budget removals'}).waitFor();
  await shot(page, 'environments');
  // the overhead budget's panel lists what it took out (removals only grow within a
  // revision: the page, loaded after this answer, has at least as many)
  const envDemo = await api('/api/environments/demo');
  check(envDemo.budget && typeof envDemo.budget.in_force === 'number', 'the environment answers its budget');
  await visit(page, '#/environments/demo');
  await page.getByText('invocation-sequence').first().waitFor();
  await page.locator('.env-budget h2', {hasText: 'Overhead budget'}).waitFor();
  // the budget in force: the environment's own (overhead_budget_pct) or the instrumenter's
  const setting = envDemo.budget.off ? 'off in this environment' :
      envDemo.budget.pct != null     ? `${envDemo.budget.pct} % of each JVM's CPU` :
                                       'cmr-instrumenter\'s default';
  await page.locator('.env-budget .badge', {hasText: setting}).waitFor();
  await shot(page, 'environment-budget');
  const budgetRows = await page.locator('.env-budget-table tbody tr').count();
  check(
      budgetRows >= envDemo.budget.shown && budgetRows <= 2000,
      `the budget panel lists what the API holds (${budgetRows} rows, ${envDemo.budget.shown} removals)`);

  // ---- a diagnosis from the page: start, untick a discovered method, stop
  step = 'diagnosis';
  say(step);
  const method = 'shop.CheckoutService.checkout(I)Ljava/lang/String;';
  await visit(page, `#/diagnoses/new?environment=demo&method=${encodeURIComponent(method)}`);
  await page.getByRole('button', {name: 'Start diagnosis'}).waitFor();
  await page.locator('select[name=environment]').selectOption('demo');
  await page.getByRole('button', {name: 'Start diagnosis'}).click();
  await page.waitForURL(/#\/diagnoses\/[0-9a-f]{16}$/);
  const did = page.url().match(/#\/diagnoses\/([0-9a-f]{16})$/)[1];
  const d1 = (await api(`/api/diagnoses/${did}`)).diagnosis;
  check(d1.state === 'active' && d1.method === method, `started active on ${method} (${d1.state} ${d1.method})`);
  // the instrumenter's tree reaches the page: PriceService.total under checkout, ticked
  const callee = page.locator('tr', {hasText: 'PriceService.total'}).locator('input[type=checkbox]').first();
  await callee.waitFor({timeout: 45000});
  check(await callee.isChecked(), 'the discovered callee is ticked (it carries a probe)');
  await shot(page, 'diagnosis');
  await callee.uncheck();
  await page.getByRole('button', {name: 'Apply selection'}).click();
  const d2 = await eventually('the new revision excludes the unticked method', async () => {
    const d = (await api(`/api/diagnoses/${did}`)).diagnosis;
    return d.revision >= 2 && d.exclude.includes('shop.PriceService.total(I)J') ? d : null;
  });
  check(d2 && d2.state === 'active', 'still active after the new revision');
  await page.getByRole('button', {name: 'Stop', exact: true}).click();
  await page.locator('dialog').getByRole('button', {name: 'Stop'}).click();
  await eventually('stopped', async () => {
    const d = (await api(`/api/diagnoses/${did}`)).diagnosis;
    return d.state === 'ended' && d.end_reason === 'stopped';
  });
  await page.getByText('ended').first().waitFor();
  step = 'diagnoses';
  await visit(page, '#/diagnoses');
  await page.getByText('CheckoutService.checkout').first().waitFor();
  await shot(page, 'diagnoses');
} catch (e) {
  fail(`${e.message.split('\n')[0]}`);
  await shot(page, 'failure').catch(() => {});
} finally {
  await browser.close();
}
for (const p of problems) fail(p);
if (failures.length) {
  console.log(`\n${failures.length} failure(s):\n  ${failures.join('\n  ')}`);
  process.exit(1);
}
console.log('browser test: every view loaded, no console errors');
