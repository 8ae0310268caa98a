// What the browser tests' scripts share: the JSON-lines talk with the Rust test, Chromium,
// the login, and the checks of a page's layout.
//
// The Rust test owns the brokers, the apps and the agents; a script owns the browser. They
// talk in JSON lines: the script prints {"step": …} on stdout when it reached a point, and
// reads {"cmd": …} from stdin when it must wait for the test. Any failure, uncaught page error
// or console error prints {"step": "error", …} and exits 1.
//
// Environment: LEO_URL (http://127.0.0.1:PORT), LEO_TOKEN (the operator token), LEO_SHOTS (the
// directory for the screenshots), CHROMIUM (the browser, /usr/bin/chromium by default).

import { mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { chromium } from 'playwright-core';

export const url = process.env.LEO_URL;
export const token = process.env.LEO_TOKEN;
export const shots = process.env.LEO_SHOTS;
export const say = (step, extra = {}) => console.log(JSON.stringify({ step, ...extra }));

const commands = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
export async function command(want) {
  const { value, done } = await commands.next();
  if (done) throw new Error(`stdin closed while waiting for ${want}`);
  const cmd = JSON.parse(value);
  if (cmd.cmd !== want) throw new Error(`expected command ${want}, got ${value}`);
  return cmd;
}

// Runs `script(page, check)` in a fresh Chromium profile at 1280 × 900; `check()` throws on any
// page or console error seen so far. A failure leaves `<name>-failure.png` for the test's message.
export async function run(name, script) {
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
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: url });
  const problems = [];
  const page = context.pages()[0] ?? (await context.newPage());
  try {
    page.setDefaultTimeout(15_000);
    page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
    page.on('console', (message) => {
      // A CSP violation or a failed script shows up here; a refused login is expected.
      const refusedLogin = message.location().url.endsWith('/login');
      if (message.type() === 'error' && !refusedLogin) {
        problems.push(`console error: ${message.text()} (${message.location().url})`);
      }
    });
    const check = () => {
      if (problems.length) throw new Error(problems.join('; '));
    };
    await script(page, check);
  } catch (error) {
    const failure = join(shots, `${name}-failure.png`);
    await page.screenshot({ path: failure, fullPage: true }).catch(() => {});
    say('error', { message: String(error?.stack ?? error), problems, screenshot: failure });
    process.exitCode = 1;
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
    process.exit();
  }
}

// Logs in with the operator token and waits for the live stream.
export async function login(page) {
  await page.goto(`${url}/`);
  if (!page.url().endsWith('/login')) throw new Error(`expected /login, got ${page.url()}`);
  await page.fill('#token', token);
  await page.click('button[type="submit"]');
  await page.waitForURL(`${url}/`);
  await page.locator('#stream[data-state="live"]').waitFor();
}

// Every word of every table cell (but the argument previews, JSON that may break anywhere)
// that the layout wrapped over two lines, measured with a Range's line boxes; and every card
// or cell whose content is wider than it. Both must be empty at any width.
export async function layoutFaults(page) {
  return page.evaluate(() => {
    const broken = [];
    for (const cell of document.querySelectorAll('td:not(.args)')) {
      if (!cell.getClientRects().length) continue; // hidden
      const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
      for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        for (const match of node.data.matchAll(/\S+/g)) {
          const range = document.createRange();
          range.setStart(node, match.index);
          range.setEnd(node, match.index + match[0].length);
          const lines = new Set([...range.getClientRects()].map((r) => Math.round(r.bottom)));
          if (lines.size > 1) broken.push(`${cell.closest('section').id}: ${JSON.stringify(match[0])}`);
        }
      }
    }
    const wide = [...document.querySelectorAll('section, td')]
      .filter((e) => e.getClientRects().length && e.scrollWidth > e.clientWidth + 1)
      .map((e) => `${e.closest('section').id} ${e.tagName}: ${e.scrollWidth} > ${e.clientWidth}`);
    const doc = document.documentElement;
    if (doc.scrollWidth > window.innerWidth) wide.push(`page: ${doc.scrollWidth} > ${window.innerWidth}`);
    return { broken, wide };
  });
}

// `layoutFaults` at `width` px, with a full-page screenshot `<shot>.png`; throws on a fault.
export async function checkLayout(page, width, shot) {
  await page.setViewportSize({ width, height: width > 600 ? 900 : 844 });
  const path = join(shots, `${shot}.png`);
  await page.screenshot({ path, fullPage: true });
  const { broken, wide } = await layoutFaults(page);
  if (broken.length || wide.length) {
    throw new Error(`at ${width} px: words broken ${JSON.stringify(broken)}, too wide ${JSON.stringify(wide)}`);
  }
  return path;
}
