// Drives the Leo web console in headless Chromium for broker/tests/console_browser.rs.
//
// The Rust test owns the broker, the app and the agent; this script owns the browser. They
// talk in JSON lines: the script prints {"step": …} on stdout when it reached a point, and
// reads {"cmd": …} from stdin when it must wait for the test. Any failure, uncaught page error
// or console error prints {"step": "error", …} and exits 1.
//
// Environment: LEO_URL (http://127.0.0.1:PORT), LEO_TOKEN (the operator token), LEO_SHOTS (the
// directory for the screenshot), CHROMIUM (the browser, /usr/bin/chromium by default).

import { mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { chromium } from 'playwright-core';

const url = process.env.LEO_URL;
const token = process.env.LEO_TOKEN;
const shots = process.env.LEO_SHOTS;
const say = (step, extra = {}) => console.log(JSON.stringify({ step, ...extra }));

const commands = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
async function command(want) {
  const { value, done } = await commands.next();
  if (done) throw new Error(`stdin closed while waiting for ${want}`);
  const cmd = JSON.parse(value);
  if (cmd.cmd !== want) throw new Error(`expected command ${want}, got ${value}`);
  return cmd;
}

mkdirSync(shots, { recursive: true });
const profile = mkdtempSync(join(tmpdir(), 'leo-console-chromium-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  viewport: { width: 1280, height: 900 },
  args: [
    '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync',
  ],
});

const problems = [];
const page = context.pages()[0] ?? (await context.newPage());
try {
  page.setDefaultTimeout(15_000);
  page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
  page.on('console', (message) => {
    // A CSP violation or a failed script shows up here; the refused login below is expected.
    const refusedLogin = message.location().url.endsWith('/login');
    if (message.type() === 'error' && !refusedLogin) {
      problems.push(`console error: ${message.text()} (${message.location().url})`);
    }
  });
  const check = () => {
    if (problems.length) throw new Error(problems.join('; '));
  };

  // Not logged in: the console sends us to the form.
  await page.goto(`${url}/`);
  if (!page.url().endsWith('/login')) throw new Error(`expected /login, got ${page.url()}`);
  await page.fill('#token', 'not-the-token');
  await page.click('button[type="submit"]');
  await page.locator('.error', { hasText: 'not the operator token' }).waitFor();
  await page.fill('#token', token);
  await page.click('button[type="submit"]');
  await page.waitForURL(`${url}/`);
  await page.locator('#stream[data-state="live"]').waitFor();
  check();
  say('logged_in');

  // An app registers a tool after the page is open: it appears without a reload.
  const { tool } = await command('expect_tool');
  await page.locator(`#groups [data-tool="${tool}"]`).waitFor();
  check();
  say('tool_seen');

  await page.click('#ask-switch');
  await page.locator('#groups [data-group="console"] [data-tool="ask_human"]').waitFor();
  if (!(await page.isChecked('#ask-switch'))) throw new Error('the switch did not stay on');
  check();
  say('ask_human_on');

  // The agent asks; the operator picks a choice.
  const { question, choice, agent } = await command('answer');
  const item = page.locator('#questions li.question', { hasText: question });
  await item.locator('.meta', { hasText: `from ${agent}` }).waitFor();
  await page.screenshot({ path: join(shots, 'console-question.png'), fullPage: true });
  await item.getByRole('button', { name: choice, exact: true }).click();
  await item.waitFor({ state: 'detached' });
  // The answered call shows in the history panel, live.
  await page.locator('#history-rows tr td.outcome.result', { hasText: 'result' }).first().waitFor();
  check();
  say('answered');

  // A second call waits; the operator cancels it from the pending list.
  const { id, long_app: longApp } = await command('cancel');
  const row = page.locator(`#calls tr[data-id="${id}"]`);
  await row.waitFor();
  await page.locator(`#agent-rows tr[data-agent="${agent}"]`, { hasText: 'native' }).waitFor();
  // The CLI's words and ages: `parked`, `12s`, `3s ago`.
  const age = await row.locator('td.age').textContent();
  if (!/^\d+s$/.test(age ?? '')) throw new Error(`age cell reads ${JSON.stringify(age)}`);
  const state = await row.locator('td.state').textContent();
  if (state !== 'parked') throw new Error(`state cell reads ${JSON.stringify(state)}`);
  const connected = await page.locator(`#agent-rows tr[data-agent="${agent}"] td[data-since]`).textContent();
  if (!/^\d+s ago$/.test(connected ?? '')) throw new Error(`connected cell reads ${JSON.stringify(connected)}`);
  await page.locator('#app-rows tr[data-client="console"] td.name', { hasText: 'web console' }).waitFor();
  // At 1280 px the app with a long name and long group names fits its card.
  await page.locator(`#app-rows tr td.name`, { hasText: longApp }).waitFor();
  const wide = await page.evaluate(() => [...document.querySelectorAll('section')]
    .filter((s) => s.scrollWidth > s.clientWidth)
    .map((s) => `${s.id}: ${s.scrollWidth} > ${s.clientWidth}`));
  const screenshot = join(shots, 'console.png');
  await page.screenshot({ path: screenshot, fullPage: true });
  if (wide.length) throw new Error(`cards overflow at 1280 px: ${wide.join(', ')}`);

  // On a phone: nothing wider than the screen, and the Cancel button inside its card.
  await page.setViewportSize({ width: 390, height: 844 });
  const phone = join(shots, 'console-phone.png');
  await page.screenshot({ path: phone, fullPage: true });
  const fit = await page.evaluate((rowId) => {
    const doc = document.documentElement;
    const button = document.querySelector(`#calls tr[data-id="${rowId}"] button.danger`).getBoundingClientRect();
    const card = document.querySelector('#pending').getBoundingClientRect();
    const wide = [...document.querySelectorAll('section')]
      .filter((s) => s.scrollWidth > s.clientWidth)
      .map((s) => s.id);
    return {
      scrollWidth: doc.scrollWidth,
      innerWidth: window.innerWidth,
      inside: button.left >= card.left && button.right <= card.right
        && button.top >= card.top && button.bottom <= card.bottom,
      wide,
    };
  }, id);
  if (fit.scrollWidth > fit.innerWidth || !fit.inside || fit.wide.length) {
    throw new Error(`the page does not fit a phone: ${JSON.stringify(fit)}`);
  }
  await page.setViewportSize({ width: 1280, height: 900 });
  await row.getByRole('button', { name: 'Cancel' }).click();
  await row.waitFor({ state: 'detached' });
  // …and moves to the history panel with its outcome and a duration.
  const ended = page.locator(`#history-rows tr[data-id="${id}"]`);
  await ended.locator('td.outcome', { hasText: 'cancelled (cancelled_by_operator)' }).waitFor();
  const took = await ended.locator('td.duration').textContent();
  if (!/^(\d+ms|\d+\.\ds)$/.test(took ?? '')) throw new Error(`duration cell reads ${JSON.stringify(took)}`);
  check();
  say('cancelled', { screenshot, phone });

  await command('done');
  say('bye');
} catch (error) {
  // What the page showed when it failed, for the test's message.
  const failure = join(shots, 'console-failure.png');
  await page.screenshot({ path: failure, fullPage: true }).catch(() => {});
  say('error', { message: String(error?.stack ?? error), problems, screenshot: failure });
  process.exitCode = 1;
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
  process.exit();
}
