// Drives an MCP client's OAuth login and its revocation through the console in headless
// Chromium, for broker/tests/console_browser.rs: the consent page (consent.js) approves and
// sends the browser to the client's redirect URI with a code, and the console's OAuth grants
// section (grants.js) lists the grant and revokes it. How it talks with the test: `lib.mjs`.

import { checkLayout, command, login, run, say, url } from './lib.mjs';

await run('grants', async (page, check) => {
  await login(page);
  check();
  say('logged_in');

  // The client sent the person to the authorization URL: the consent page, already logged in.
  const { authorize, redirect } = await command('consent');
  await page.goto(authorize);
  await page.locator('#consent strong', { hasText: 'Test Client' }).waitFor();
  await page.fill('#agent', 'browser-agent');
  // The client's loopback callback, played by the browser itself: the page it lands on.
  const isCallback = (u) => u.href.startsWith(redirect);
  await page.route(isCallback, (r) => r.fulfill({ status: 200, contentType: 'text/plain', body: 'done' }));
  await page.getByRole('button', { name: 'Approve' }).click();
  await page.waitForURL(isCallback);
  say('approved', { redirect: page.url() });

  // The grant, once the client exchanged its code, is listed, and revoked with its button.
  const { agent } = await command('revoke');
  await page.goto(`${url}/`);
  const row = page.locator('#grant-rows tr', { hasText: agent });
  await row.locator('td', { hasText: 'Test Client' }).waitFor();
  await row.locator('td[data-label="Last used"][data-since]').waitFor();
  const phone = await checkLayout(page, 390, 'grants-phone');
  const screenshot = await checkLayout(page, 1280, 'grants');
  await row.getByRole('button', { name: 'Revoke' }).click();
  await row.waitFor({ state: 'detached' });
  await page.locator('#no-grants').waitFor();
  check();
  say('revoked', { screenshot, phone });

  await command('done');
  say('bye');
});
