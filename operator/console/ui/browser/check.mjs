// Loads the console in Debian's headless Chromium (playwright-core, no downloaded browser) and
// checks every page the way an operator would see it: no console error and no failed request,
// the numbers the backend served, theme and language surviving a reload, an axe-core scan with
// no serious or critical violation, and (with --management) a topic created through the
// dialogs. Screenshots of each page in both themes go to --out.
//
//   node browser/check.mjs --url http://127.0.0.1:4180/ --out shots [--management] [--topic t]
//
// Prints one line per check and a JSON summary; exits 1 on the first failed check.

import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { chromium } from 'playwright-core';
import { AxeBuilder } from '@axe-core/playwright';

const { values: args } = parseArgs({
  options: {
    url: { type: 'string' },
    out: { type: 'string', default: 'screenshots' },
    management: { type: 'boolean', default: false },
    topic: { type: 'string', default: 'created-in-browser' },
    chromium: { type: 'string', default: process.env.CHROMIUM_BIN ?? '/usr/bin/chromium' },
  },
});
if (!args.url) {
  console.error('usage: check.mjs --url <console base URL> [--out dir] [--management] [--topic name]');
  process.exit(2);
}
const BASE = args.url.endsWith('/') ? args.url : `${args.url}/`;
const PAGES = ['overview', 'brokers', 'topics', 'storage', 'operations', 'configuration'];
mkdirSync(args.out, { recursive: true });

const summary = { checks: [], screenshots: [], axe: {} };
// Each line carries the seconds since the script started, and `doing` names the step under way:
// a check that fails by a browser timeout, not by a comparison, says where and when it stopped.
const started = Date.now();
const since = () => `${((Date.now() - started) / 1000).toFixed(1)} s`;
let doing = 'starting Chromium';
function pass(name, detail = '') {
  summary.checks.push({ name, ok: true, detail, at: since() });
  console.log(`ok   ${name}${detail ? `: ${detail}` : ''} [${since()}]`);
}
function fail(name, detail) {
  summary.checks.push({ name, ok: false, detail, at: since() });
  console.log(`FAIL ${name}: ${detail} [${since()}]`);
  writeFileSync(join(args.out, 'summary.json'), JSON.stringify(summary, null, 2));
  throw new Error(`${name}: ${detail}`);
}
function expectEq(name, got, want) {
  if (JSON.stringify(got) === JSON.stringify(want)) pass(name, JSON.stringify(got));
  else fail(name, `got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
}

/** Each watched page's requests in flight, and who waits for there to be none. */
const inflight = new WeakMap();

/** Errors the page reports: console errors, uncaught exceptions, failed or >= 400 requests. */
function watch(page) {
  const problems = [];
  const open = new Set();
  let waiters = [];
  const ended = (r) => {
    open.delete(r);
    if (open.size === 0) {
      waiters.forEach((w) => w());
      waiters = [];
    }
  };
  page.on('request', (r) => open.add(r));
  page.on('requestfinished', ended);
  page.on('requestfailed', ended);
  const state = {
    open,
    idle: () => (open.size === 0 ? Promise.resolve() : new Promise((w) => waiters.push(w))),
    // While the test itself reloads or leaves the page (see `navigate`).
    navigating: 0,
  };
  inflight.set(page, state);
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    // Chromium logs every 4xx answer as a console error; a management refusal the test asks
    // for (a wrong confirmation) is such an answer, shown by the dialog, and nothing else is.
    const refusal =
      /status of 4\d\d/.test(m.text()) && m.location().url.includes('/api/v1/management/');
    if (!refusal) problems.push(`console error: ${m.text()} (${m.location().url})`);
  });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('requestfailed', (r) => {
    // A poll that started after `settle` and before the test's own reload is cancelled by
    // that reload: the browser's doing, at the test's request, not a failure of the page.
    if (state.navigating > 0 && r.failure()?.errorText === 'net::ERR_ABORTED') return;
    problems.push(`request failed: ${r.url()} ${r.failure()?.errorText}`);
  });
  page.on('response', (r) => {
    // Management errors are answers the dialogs show; every other error status is a failure.
    const expected = r.url().includes('/api/v1/management/') && r.status() < 500;
    if (r.status() >= 400 && !expected) problems.push(`HTTP ${r.status()}: ${r.url()}`);
  });
  return problems;
}

async function snapshot(page) {
  return page.evaluate(() => fetch('api/v1/snapshot').then((r) => r.json()));
}

/** Until (at most 30 s) no request of the page is in flight: a navigation would abort a poll
 * still running, and Chromium reports that as a failed request. */
async function settle(page) {
  const { open, idle } = inflight.get(page);
  let timer;
  const bound = new Promise((w) => {
    timer = setTimeout(w, 30_000);
  });
  await Promise.race([idle(), bound]);
  clearTimeout(timer);
  if (open.size > 0) {
    fail('requests settle before a navigation', [...open].map((r) => r.url()).join(', '));
  }
}

/** Settles, then runs the test's navigation `go` (a reload, a goto). */
async function navigate(page, go) {
  await settle(page);
  const state = inflight.get(page);
  state.navigating += 1;
  try {
    await go();
  } finally {
    state.navigating -= 1;
  }
}

/** Until an element `selector` matches is visible. A locator's wait, not `waitForSelector`:
 * that one also hands the element back, adopting it into the page's main world after it is
 * seen, and once timed out after logging the element visible (CI, the machine's two cores
 * shared with eight other stages). */
async function visible(page, selector, timeout = 30_000) {
  await page.locator(selector).first().waitFor({ state: 'visible', timeout });
}

async function open(page, name) {
  doing = `loading the ${name} page`;
  await navigate(page, () => page.goto(`${BASE}#/${name}`));
  doing = `waiting for the ${name} page to show`;
  await visible(page, `[data-testid="page-${name}"]`);
  doing = `waiting for the ${name} page's charts`;
  // Screenshots and the accessibility scan wait for the charts (drawn without animation once
  // their data is in): every chart holder on the page has drawn its SVG.
  await page.waitForFunction(
    () =>
      [...document.querySelectorAll('.cds--chart-holder')].every((h) =>
        h.querySelector('svg.layout-svg-wrapper path, svg.layout-svg-wrapper rect'),
      ),
    null,
    { timeout: 30_000 },
  );
  doing = `on the ${name} page`;
}

async function theme(page, want) {
  const now = await page.evaluate(() => localStorage.getItem('rustqueue-theme') ?? 'g10');
  if (now !== want) {
    await page.click('[data-testid="theme-toggle"]');
    await visible(page, `.cds--${want}`);
  }
}

async function everyPage(page) {
  for (const t of ['g10', 'g100']) {
    for (const name of PAGES) {
      await open(page, name);
      doing = `switching the ${name} page to ${t}`;
      await theme(page, t);
      doing = `the screenshot and axe scan of the ${name} page (${t})`;
      const file = join(args.out, `${name}-${t === 'g10' ? 'light' : 'dark'}.png`);
      await page.screenshot({ path: file, fullPage: true });
      summary.screenshots.push(file);
      const axe = await new AxeBuilder({ page }).analyze();
      const bad = axe.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
      summary.axe[`${name}-${t}`] = axe.violations.map((v) => `${v.impact}: ${v.id}`);
      if (bad.length > 0) {
        fail(`axe ${name} ${t}`, bad.map((v) => `${v.id} (${v.impact}): ${v.nodes.map((n) => n.target.join(' ')).slice(0, 3).join(', ')}`).join('; '));
      }
      pass(`page ${name} ${t}`, `screenshot and axe (${axe.violations.length} minor)`);
    }
  }
}

async function numbers(page) {
  await open(page, 'overview');
  const s = await snapshot(page);
  expectEq('phase tile', await page.textContent('[data-testid="phase"]'), s.cluster.phase);
  expectEq(
    'brokers tile',
    await page.textContent('[data-testid="brokers-ready"]'),
    `${s.cluster.ready_brokers} / ${s.cluster.desired_brokers}`,
  );
  expectEq(
    'stored tile',
    await page.textContent('[data-testid="stored"]'),
    Math.round(s.summary.stored_messages).toLocaleString('en'),
  );
  await open(page, 'brokers');
  const brokers = await page.$$eval('[data-testid="brokers-table"] tbody tr', (rows) =>
    rows.map((r) => r.getAttribute('data-row')),
  );
  expectEq('broker rows', brokers, s.brokers.map((b) => b.name));
  await open(page, 'topics');
  const topics = await page.$$eval('[data-testid="topics-table"] tbody tr', (rows) =>
    rows.map((r) => r.getAttribute('data-row')).filter(Boolean),
  );
  expectEq('topic rows', topics, s.topics.map((t) => t.name));
  const depths = await page.$$eval('[data-testid="channels-table"] tbody tr', (rows) =>
    rows
      .filter((r) => r.getAttribute('data-row'))
      .map((r) => [r.getAttribute('data-row'), r.querySelector('[data-col="depth"]')?.textContent]),
  );
  const want = s.topics.flatMap((t) =>
    t.channels.map((c) => [`${t.name}/${c.name}`, Math.round(c.depth).toLocaleString('en')]),
  );
  expectEq('channel depths', depths, want);
}

async function persistence(page) {
  await open(page, 'overview');
  doing = 'theme and language across a reload';
  await theme(page, 'g100');
  await navigate(page, () => page.reload());
  await visible(page, '[data-testid="page-overview"]');
  expectEq('dark theme after reload', await page.$eval('html', () => localStorage.getItem('rustqueue-theme')), 'g100');
  if (!(await page.$('.cds--g100'))) fail('dark theme after reload', 'no .cds--g100 element');
  await page.click('[data-testid="language-toggle"]');
  await page.waitForFunction(() => document.querySelector('h1')?.textContent?.startsWith('集群'));
  await navigate(page, () => page.reload());
  await visible(page, '[data-testid="page-overview"]');
  const h1 = await page.textContent('h1');
  if (!h1.startsWith('集群')) fail('Chinese after reload', `h1 is ${h1}`);
  pass('Chinese after reload', h1);
  const file = join(args.out, 'overview-dark-zh.png');
  await page.screenshot({ path: file, fullPage: true });
  summary.screenshots.push(file);
  await page.click('[data-testid="language-toggle"]');
  await theme(page, 'g10');
}

async function management(page) {
  await open(page, 'topics');
  doing = 'creating a topic through the dialogs';
  const mgmt = await page.evaluate(() => fetch('api/v1/management').then((r) => r.json()));
  await page.click('[data-testid="management-unlock"]');
  const unlock = page.locator('[data-testid="unlock-dialog"]');
  await unlock.locator('input').fill('wrong/confirmation');
  await unlock.getByRole('button', { name: /Unlock management/ }).click();
  const err = await unlock.locator('[data-testid="management-error"]').textContent();
  if (!err.includes('E_CONFIRMATION_MISMATCH')) fail('wrong unlock confirmation', err);
  pass('wrong unlock confirmation refused', err.trim());
  await unlock.locator('input').fill(mgmt.confirmation);
  await unlock.getByRole('button', { name: /Unlock management/ }).click();
  await visible(page, '[data-testid="management-lock"]');
  pass('unlocked', mgmt.confirmation);
  await page.click('[data-testid="create-topic"]');
  const create = page.locator('[data-testid="create-dialog"]');
  await create.locator('#create-topic').fill(args.topic);
  await create.getByRole('button', { name: 'Preview' }).click();
  const action = page.locator('[data-testid="action-dialog"]');
  await action.locator('[data-testid="preview"]').waitFor();
  const preview = await action.locator('[data-testid="preview"]').textContent();
  pass('create preview', preview.trim().slice(0, 200));
  await page.screenshot({ path: join(args.out, 'management-preview.png') });
  await action.getByRole('button', { name: 'Apply' }).click();
  await action.locator('[data-testid="management-accepted"]').waitFor({ timeout: 20_000 });
  pass('create accepted');
  await action.getByRole('button', { name: 'Done', exact: true }).click();
  await visible(page, `[data-testid="topics-table"] tr[data-row="${args.topic}"]`, 60_000);
  pass('created topic on the topics page', args.topic);
  // A destructive action with the wrong typed confirmation is refused with the backend's code.
  await page.click(`[data-testid="actions-${args.topic}"]`);
  await page.getByRole('menuitem', { name: 'Delete' }).click();
  const del = page.locator('[data-testid="action-dialog"]');
  await del.locator('#action-confirmation').fill(`not-${args.topic}`);
  await del.getByRole('button', { name: 'Apply' }).click();
  const delErr = await del.locator('[data-testid="management-error"]').textContent();
  if (!/E_CONFIRMATION/.test(delErr)) fail('wrong delete confirmation', delErr);
  pass('wrong delete confirmation refused', delErr.trim());
  await page.screenshot({ path: join(args.out, 'management-refused.png') });
  await del.getByRole('button', { name: 'Cancel' }).click();
}

// Some of Playwright's calls (page.evaluate, a screenshot's fonts) wait without a timeout: a
// browser wedged in one of them ends the check here, saying where, instead of hanging the suite.
const WATCHDOG_MS = 10 * 60_000;
setTimeout(() => {
  console.log(`FAIL ${doing}: the check ran past its ${WATCHDOG_MS / 60_000}-minute limit [${since()}]`);
  writeFileSync(join(args.out, 'summary.json'), JSON.stringify(summary, null, 2));
  process.exit(1);
}, WATCHDOG_MS).unref();

/** What the page showed when a step failed: a screenshot, and the test ids on the page. */
async function evidence(b) {
  const page = b.contexts()[0]?.pages()[0];
  if (!page) return;
  const file = join(args.out, 'failure.png');
  await page.screenshot({ path: file, fullPage: true, timeout: 10_000 });
  const ids = await page.$$eval('[data-testid]', (els) => els.map((el) => el.getAttribute('data-testid')));
  console.log(`     the page (${page.url()}) shows test ids: ${ids.join(' ')}; screenshot ${file}`);
}

const browser = await chromium.launch({
  executablePath: args.chromium,
  args: [
    '--no-sandbox',
    '--disable-gpu',
    '--disable-quic',
    '--no-first-run',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
  ],
});
console.log(`     Chromium ${browser.version()} started [${since()}]`);
let status = 0;
try {
  const context = await browser.newContext({ viewport: { width: 1366, height: 900 } });
  const page = await context.newPage();
  const problems = watch(page);
  await numbers(page);
  await everyPage(page);
  await persistence(page);
  if (args.management) await management(page);
  if (problems.length > 0) fail('no console error and no failed request', problems.join('\n'));
  pass('no console error and no failed request');
} catch (e) {
  const message = e instanceof Error ? e.message : String(e);
  // A failed comparison has printed its FAIL line; a browser error or timeout has not.
  if (!summary.checks.some((c) => !c.ok)) {
    summary.checks.push({ name: doing, ok: false, detail: message, at: since() });
    console.log(`FAIL ${doing}: ${message.split('\n')[0]} [${since()}]`);
    await evidence(browser).catch((err) => console.error(`no failure evidence: ${err}`));
  }
  console.error(message);
  status = 1;
} finally {
  await browser.close();
  writeFileSync(join(args.out, 'summary.json'), JSON.stringify(summary, null, 2));
}
process.exit(status);
