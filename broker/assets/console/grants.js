// The console's OAuth grants: which MCP clients may act as which agent, and a Revoke button
// that ends a grant and every token of it at once. Loaded after console.js, whose building
// blocks (el, word, fill, post, notice, tick) it uses; a grant is no part of the status
// snapshot, so the list is read on load, after each revocation, and every 15 s.
'use strict';

function grantRow(g) {
  const revoke = el('button', { type: 'button', class: 'revoke', text: 'Revoke' });
  revoke.addEventListener('click', async () => {
    revoke.disabled = true;
    try {
      await post(`/console/oauth/grants/${encodeURIComponent(g.id)}/revoke`, {});
      notice('');
    } catch (error) {
      notice(error.message);
    }
    refreshGrants();
  });
  const stamp = (ms) => (ms == null ? el('td', { text: 'not yet' })
    : el('td', { 'data-since': new Date(ms).toISOString() }));
  const used = stamp(g.last_used_ms);
  used.dataset.label = 'Last used';
  const created = stamp(g.created_ms);
  created.dataset.label = 'Created';
  return el('tr', { 'data-id': g.id },
    el('td', { 'data-label': 'Agent' }, word(g.agent)),
    el('td', { 'data-label': 'Client', title: g.client_id }, word(g.client_name || g.client_id)),
    el('td', { 'data-label': 'Approved by' }, word(g.approved_by)),
    created,
    used,
    el('td', {}, revoke));
}

async function refreshGrants() {
  try {
    const response = await fetch('/console/oauth/grants');
    if (!response.ok) return;
    const { grants } = (await response.json()).data;
    fill($('grant-rows'), grants.map(grantRow), 'no-grants');
    tick();
  } catch {
    // The next refresh tries again.
  }
}

refreshGrants();
setInterval(refreshGrants, 15_000);
