// Drives the Leo web console in headless Chromium for broker/tests/console_browser.rs, against
// one broker: logging in, a tool appearing, answering `ask_human`, cancelling a call, and the
// layout at 1280 and 390 px. How it talks with the test: `lib.mjs`.

import { checkLayout, command, login, run, say, url } from './lib.mjs';

await run('console', async (page, check) => {
  // Not logged in: the console sends us to the form.
  await page.goto(`${url}/`);
  if (!page.url().endsWith('/login')) throw new Error(`expected /login, got ${page.url()}`);
  await page.fill('#token', 'not-the-token');
  await page.click('button[type="submit"]');
  await page.locator('.error', { hasText: 'not the operator token' }).waitFor();
  await login(page);
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
  // The app with a long name and long group names: its name shortened, whole on hover.
  const name = page.locator(`#app-rows td.name .word[data-full="${longApp}"]`);
  await name.waitFor();
  if ((await name.getAttribute('title')) !== longApp) throw new Error('the whole name is not on hover');
  // At 1280 px no card is wider than the screen's half, and no cell breaks a word.
  const screenshot = await checkLayout(page, 1280, 'console');
  // On a phone: nothing wider than the screen, no word broken, Cancel inside its card.
  const phone = await checkLayout(page, 390, 'console-phone');
  const inside = await page.evaluate((rowId) => {
    const button = document.querySelector(`#calls tr[data-id="${rowId}"] button.danger`).getBoundingClientRect();
    const card = document.querySelector('#pending').getBoundingClientRect();
    return button.left >= card.left && button.right <= card.right
      && button.top >= card.top && button.bottom <= card.bottom;
  }, id);
  if (!inside) throw new Error('the Cancel button is outside its card on a phone');
  await page.setViewportSize({ width: 1280, height: 900 });
  await row.getByRole('button', { name: 'Cancel' }).click();
  await row.waitFor({ state: 'detached' });
  // …and moves to the history panel with its outcome and a duration.
  const ended = page.locator(`#history-rows tr[data-id="${id}"]`);
  await ended.locator('td.outcome', { hasText: 'cancelled (cancelled_by_operator)' }).waitFor();
  const took = await ended.locator('td.duration').textContent();
  if (!/^(\d+ms|\d+\.\ds)$/.test(took ?? '')) throw new Error(`duration cell reads ${JSON.stringify(took)}`);
  // The chart of the last hour counts both calls: the answered question and the cancelled one.
  await page.locator('#legend li[data-outcome="cancelled"][data-count="1"]').waitFor();
  await page.locator('#legend li[data-outcome="result"][data-count="1"]').waitFor();
  check();
  say('cancelled', { screenshot, phone });

  await command('done');
  say('bye');
});
