// Drives the Leo web console in headless Chromium for broker/tests/console_browser.rs, on a
// two-instance cluster, logged in through the follower: the Instances card, the chart of the
// last hour's calls, whole words at 1280 and 390 px, and the copy of a shortened id. How it
// talks with the test: `lib.mjs`.

import { checkLayout, command, login, run, say } from './lib.mjs';

await run('cluster', async (page, check) => {
  await login(page);
  // The switch brings the console's own app, `console`, into the Apps table.
  await page.click('#ask-switch');
  await page.locator('#app-rows tr[data-client="console"]').waitFor();
  check();
  say('logged_in');

  const { leader, follower, counts } = await command('look');
  // The Instances card: each instance with its role, when it was last seen, and who is
  // connected through it (the app and the agent went through the follower).
  const card = page.locator('#instances');
  await card.waitFor();
  for (const [id, role, here] of [[leader, 'leader', '1 app · 0 agents'], [follower, 'follower', '1 app · 1 agent']]) {
    const row = card.locator(`tr[data-instance="${id}"]`);
    await row.locator('td.role', { hasText: role }).waitFor();
    await row.locator('td.here', { hasText: here }).waitFor();
    const seen = await row.locator('td[data-since]').textContent();
    if (!/^\d+s ago$/.test(seen ?? '')) throw new Error(`${role}'s seen cell reads ${JSON.stringify(seen)}`);
  }
  // A long id is shortened, whole on hover, and its button copies it whole.
  const id = card.locator(`tr[data-instance="${follower}"] td[data-label="Instance"]`);
  const shown = (await id.locator('.word').textContent()) ?? '';
  if (shown === follower || !shown.includes('…')) throw new Error(`the id reads ${JSON.stringify(shown)}`);
  if ((await id.locator('.word').getAttribute('title')) !== follower) throw new Error('no whole id on hover');
  await id.locator('button.copy').click();
  await id.locator('button.copy[data-copied]').waitFor();
  const copied = await page.evaluate(() => navigator.clipboard.readText());
  if (copied !== follower) throw new Error(`copied ${JSON.stringify(copied)}, not ${follower}`);
  // The app and the agent say which instance they came through.
  await page.locator(`#app-rows tr .word[data-full="${follower}"]`).waitFor();
  await page.locator(`#agent-rows tr .word[data-full="${follower}"]`).waitFor();

  // The chart counts the calls the test made, by outcome, and draws a bar for them.
  for (const [outcome, n] of Object.entries(counts)) {
    await page.locator(`#legend li[data-outcome="${outcome}"][data-count="${n}"]`).waitFor();
  }
  const drawn = await page.locator('#chart g rect').count();
  if (drawn === 0) throw new Error('the chart has no bar');
  // When each instance was last seen comes again with no change of the broker's, so "seen"
  // does not grow while the instances are alive.
  const seen = `#instances tr[data-instance="${leader}"] td[data-since]`;
  const before = await page.locator(seen).getAttribute('data-since');
  await page.waitForFunction(([cell, stamp]) => document.querySelector(cell)?.dataset.since !== stamp,
    [seen, before], { timeout: 20_000 });
  check();

  const screenshot = await checkLayout(page, 1280, 'cluster');
  const phone = await checkLayout(page, 390, 'cluster-phone');
  check();
  say('looked', { screenshot, phone });
  await command('done');
  say('bye');
});
