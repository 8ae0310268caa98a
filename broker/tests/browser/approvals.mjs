// Drives the console's approvals for broker/tests/console_browser.rs: calls that await
// approval appear live, their arguments inert (markup stays text, terminal escapes show as
// `\u001b`), the operator approves one with edited arguments and denies another with a reason,
// and a call another approver decided leaves the list. How it talks with the test: `lib.mjs`.

import { checkLayout, command, login, run, say } from './lib.mjs';

await run('approvals', async (page, check) => {
  await login(page);
  await page.locator('#no-approvals').waitFor();
  // The tools that need approval say so in the tools' listing.
  await page.locator('#groups [data-tool="deploy"] .badge.approval', { hasText: 'needs approval' }).waitFor();
  await page.locator('#groups [data-tool="wipe"] .badge.approval').waitFor();
  check();
  say('logged_in');

  // A call with hostile arguments appears without a reload.
  const { id, markup, escape } = await command('edit');
  const item = page.locator(`#approval-list li[data-id="${id}"]`);
  await item.waitFor();
  const shown = await item.locator('pre.arguments').textContent();
  if (!shown.includes(markup)) throw new Error(`the markup is not shown as text: ${JSON.stringify(shown)}`);
  if (!shown.includes(escape)) throw new Error(`the escape is not shown inert: ${JSON.stringify(shown)}`);
  if (/[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u202a-\u202e]/.test(shown)) {
    throw new Error(`a control character reached the page: ${JSON.stringify(shown)}`);
  }
  const hostile = await page.evaluate(() => ({
    elements: document.querySelectorAll('#approvals img, #approvals script, #pending img').length,
    ran: window.leoPwned === true,
  }));
  if (hostile.elements || hostile.ran) throw new Error(`the arguments became markup: ${JSON.stringify(hostile)}`);
  await item.locator('.meta', { hasText: 'asked by ci-7' }).waitFor();
  await item.locator('.meta [data-since]', { hasText: /^\d+s ago$/ }).waitFor();
  await page.locator(`#calls tr[data-id="${id}"] td.state`, { hasText: 'awaiting approval' }).waitFor();
  // The pending list's preview of the same arguments is inert too.
  const preview = await page.locator(`#calls tr[data-id="${id}"] td.args`).textContent();
  if (!preview.includes('\\u202e') || /[\u0000-\u001f\u202a-\u202e]/.test(preview)) {
    throw new Error(`the preview is not inert: ${JSON.stringify(preview)}`);
  }
  const screenshot = await checkLayout(page, 1280, 'approvals');
  const phone = await checkLayout(page, 390, 'approvals-phone');
  await page.setViewportSize({ width: 1280, height: 900 });
  // Approve with edited arguments: bad JSON is refused in the page, then the edit goes.
  await item.getByRole('button', { name: 'Edit arguments' }).click();
  await item.locator('textarea').fill('{"env": ');
  await item.getByRole('button', { name: 'Approve with these arguments' }).click();
  await page.locator('#notice', { hasText: 'not JSON' }).waitFor();
  await item.locator('textarea').fill('{"env": "staging"}');
  await item.getByRole('button', { name: 'Approve with these arguments' }).click();
  await item.waitFor({ state: 'detached' });
  check();
  say('edited', { screenshot, phone });

  // A call whose policy allows no edits: no edit button; denied with a reason.
  const { id: other, reason } = await command('deny');
  const second = page.locator(`#approval-list li[data-id="${other}"]`);
  await second.waitFor();
  if (await second.getByRole('button', { name: 'Edit arguments' }).count()) {
    throw new Error('a call whose policy allows no edits offers an edit');
  }
  await second.locator('input[name="reason"]').fill(reason);
  await second.getByRole('button', { name: 'Deny' }).click();
  await second.waitFor({ state: 'detached' });
  check();
  say('denied');

  // Another approver decides a call: it leaves the list live.
  const { id: third } = await command('appear');
  const gone = page.locator(`#approval-list li[data-id="${third}"]`);
  await gone.waitFor();
  say('appeared');
  await command('gone');
  await gone.waitFor({ state: 'detached' });
  await page.locator('#no-approvals').waitFor();
  check();
  say('gone', { screenshot, phone });

  await command('done');
  say('bye');
});
