// screenshots.mjs - the pictures of docs/images/ui-*.png, taken from a running cmr-ui
// (scripts/demo.sh --serve prints its address) in Debian's chromium:
//
//   node tests/ui/screenshots.mjs http://127.0.0.1:PORT/ docs/images
//
// It picks what it shows from the API: the slowest complete trace that crossed both JVMs,
// the demo's diagnosis, the payment service's bank calls in the metrics.
import fs from 'node:fs';
import path from 'node:path';

import {chromium} from '../../cmr-ui/web/node_modules/playwright-core/index.mjs';

const [base, dir, executablePath = '/usr/bin/chromium'] = process.argv.slice(2);
const api = async (p) => (await fetch(new URL(p, base))).json();
fs.mkdirSync(dir, {recursive: true});
const browser = await chromium.launch({
  executablePath,
  args: [
    '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync',
    '--no-first-run'
  ],
});
const page = await browser.newPage({viewport: {width: 1400, height: 860}});
async function shot(hash, name, ready, act) {
  await page.goto(new URL(`/${hash}`, base).href);
  await page.locator(ready).first().waitFor({timeout: 20000});
  if (act) await act();
  await page.waitForTimeout(800);
  await page.screenshot({path: path.join(dir, `ui-${name}.png`)});
  console.log(`ui-${name}.png`);
}

const list = (await api('/api/traces?slowest=1&limit=500')).traces;
const t = list.find((x) => x.complete && x.jvms === 2) || list[0];
await shot('#/traces', 'traces', '.tl-row:not(.tl-head)');
await shot(`#/trace/${t.trace_id}`, 'trace', '.tr-row', async () => {
  await page.getByRole('button', {name: 'Expand all'}).click();
});
await shot(`#/trace/${t.trace_id}?tab=waterfall`, 'waterfall', 'canvas');
await shot(`#/trace/${t.trace_id}?tab=flame`, 'flame', 'canvas');
const top = (await api('/api/metrics/top?env=demo&kind=method&last=1h')).items || [];
const bank = top.find((m) => m.name.startsWith('payments.Bank.authorize')) || top[0];
await shot(`#/metrics?env=demo&kind=method&sel=${bank ? bank.subject : ''}`, 'metrics', 'canvas');
await shot('#/agents', 'agents', 'table');
await shot('#/environments/demo', 'environment', 'text=invocation-sequence');
const diags = (await api('/api/diagnoses')).diagnoses;
if (diags.length) {
  await shot(`#/diagnoses/${diags[0].id}`, 'diagnosis', 'text=Discovered callees');
  await shot('#/diagnoses', 'diagnoses', 'table');
}
await browser.close();
