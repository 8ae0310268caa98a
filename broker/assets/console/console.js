// The Leo console's one script. It keeps a live view of the broker from the `status`
// snapshots of /console/events and sends a few POSTs, each with the session's CSRF token.
// No framework: the DOM is built with createElement and textContent, never from HTML strings,
// so nothing an app or an agent sends can become markup.
'use strict';

const csrf = document.querySelector('meta[name="leo-csrf"]').content;
const $ = (id) => document.getElementById(id);

let status = null; // the last snapshot
let receivedAt = 0; // when it arrived, on performance.now()'s clock

// ----- building blocks -----

// el('td', {class: 'age', text: '3 s', 'data-age': 3}, child, 'text', …)
function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === 'class') node.className = value;
    else if (key === 'text') node.textContent = value;
    else if (key.startsWith('data-')) node.setAttribute(key, value);
    else node[key] = value;
  }
  node.append(...children);
  return node;
}

// Replaces a table body's rows and shows its "none" line when there are none.
function fill(tbody, rows, emptyId) {
  tbody.replaceChildren(...rows);
  $(emptyId).hidden = rows.length > 0;
}

function notice(message) {
  $('notice').textContent = message;
  $('notice').hidden = !message;
}

// Ages as `leo status` and `leo requests` print them: `3s`, `2m10s`, `1h05m`, `3d4h`.
function formatAge(secs) {
  const s = Math.max(0, Math.floor(secs));
  const pad = (n) => String(n).padStart(2, '0');
  const [d, h, m] = [Math.floor(s / 86400), Math.floor(s / 3600) % 24, Math.floor(s / 60) % 60];
  if (d > 0) return `${d}d${h}h`;
  if (h > 0) return `${h}h${pad(m)}m`;
  if (m > 0) return `${m}m${pad(s % 60)}s`;
  return `${s}s`;
}

// A tool's timeout as the CLI prints it: `never` for a handoff.
function formatTimeout(timeoutS) {
  return timeoutS == null || timeoutS === 0 ? 'never' : formatAge(timeoutS);
}

// How long ago an RFC 3339 stamp of the broker's was, on this browser's clock (the console
// runs beside the broker, as the CLI does).
function since(timestamp) {
  const t = Date.parse(timestamp);
  return Number.isNaN(t) ? 0 : Math.max(0, Math.floor((Date.now() - t) / 1000));
}

// An app as the CLI shows it: its name if it gave one, else who opened its stream.
function appLabel(clientId) {
  const app = (status.apps || []).find((a) => a.client_id === clientId);
  return app && app.name ? `${app.name} (${clientId})` : clientId;
}

// Ages tick between snapshots: each [data-age] holds the age the snapshot gave, each
// [data-since] the broker's stamp of when something connected.
function tick() {
  const elapsed = Math.floor((performance.now() - receivedAt) / 1000);
  for (const cell of document.querySelectorAll('[data-age]')) {
    cell.textContent = formatAge(Number(cell.dataset.age) + elapsed);
  }
  for (const cell of document.querySelectorAll('[data-since]')) {
    cell.textContent = `${formatAge(since(cell.dataset.since))} ago`;
  }
}
setInterval(tick, 1000);

async function post(path, body) {
  const response = await fetch(path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-leo-csrf': csrf },
    body: JSON.stringify(body),
  });
  if (response.status === 401) {
    location.assign('/login');
  }
  let reply;
  try {
    reply = await response.json();
  } catch {
    throw new Error(`${response.status} ${response.statusText}`);
  }
  if (!reply.ok) throw new Error(reply.error);
  return reply.data;
}

// ----- the live stream -----

function setStream(state, text) {
  $('stream').dataset.state = state;
  $('stream').textContent = text;
}

function connect() {
  setStream('connecting', 'connecting…');
  const source = new EventSource('/console/events');
  source.addEventListener('open', () => setStream('live', 'live'));
  source.addEventListener('status', (event) => {
    status = JSON.parse(event.data);
    receivedAt = performance.now();
    render();
  });
  source.addEventListener('error', () => {
    if (source.readyState === EventSource.CLOSED) {
      // Refused, not dropped: find out whether the login ended, else try again.
      source.close();
      setStream('disconnected', 'disconnected, retrying…');
      setTimeout(reconnect, 2000);
    } else {
      setStream('connecting', 'reconnecting…');
    }
  });
}

async function reconnect() {
  try {
    const response = await fetch('/console/session');
    if (response.status === 401) {
      location.assign('/login');
      return;
    }
  } catch {
    setTimeout(reconnect, 2000);
    return;
  }
  connect();
}

// ----- the sections -----

function render() {
  renderAsk();
  renderCalls();
  refreshHistory();
  renderTools();
  renderApps();
  renderAgents();
  tick();
}

function renderAsk() {
  const toggle = $('ask-switch');
  if (!toggle.disabled) toggle.checked = status.ask_human;
  const asks = status.requests.filter((r) => r.group === 'console' && r.tool === 'ask_human');
  const list = $('questions');
  const waiting = new Map(asks.map((r) => [r.id, r]));
  // Keyed by request id, so a half-typed answer survives the next snapshot.
  for (const item of [...list.children]) {
    const r = waiting.get(item.dataset.id);
    if (r) item.querySelector('[data-age]').dataset.age = r.age_s;
    else item.remove();
  }
  const shown = new Set([...list.children].map((item) => item.dataset.id));
  for (const r of asks) {
    if (!shown.has(r.id)) list.append(question(r));
  }
  $('no-questions').hidden = asks.length > 0;
}

function question(r) {
  const args = r.arguments || {};
  const item = el('li', { class: 'question', 'data-id': r.id });
  item.append(
    el('p', { class: 'text', text: String(args.question ?? '') }),
    el('p', { class: 'meta' }, `from ${r.agent} · asked `, el('span', { 'data-age': r.age_s }), ' ago'),
  );
  const form = el('form');
  const choices = Array.isArray(args.choices) ? args.choices.filter((c) => typeof c === 'string') : [];
  for (const choice of choices) {
    const button = el('button', { type: 'button', class: 'choice', text: choice });
    button.addEventListener('click', () => answer(item, r.id, choice));
    form.append(button);
  }
  const input = el('input', {
    type: 'text',
    name: 'answer',
    placeholder: choices.length ? 'or type another answer' : 'Your answer',
  });
  form.append(input, el('button', { type: 'submit', text: 'Answer' }));
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    answer(item, r.id, input.value);
  });
  item.append(form);
  return item;
}

async function answer(item, id, text) {
  if (!text.trim()) return;
  const controls = item.querySelectorAll('button, input');
  controls.forEach((c) => { c.disabled = true; });
  try {
    await post(`/console/requests/${encodeURIComponent(id)}/answer`, { text });
    notice('');
  } catch (error) {
    notice(error.message);
    controls.forEach((c) => { c.disabled = false; });
  }
}

function renderCalls() {
  const rows = status.requests.map((r) => {
    const cancel = el('button', { type: 'button', class: 'danger', text: 'Cancel' });
    cancel.addEventListener('click', async () => {
      cancel.disabled = true;
      try {
        await post(`/console/requests/${encodeURIComponent(r.id)}/cancel`, {});
        notice('');
      } catch (error) {
        notice(error.message);
        cancel.disabled = false;
      }
    });
    // The words of `leo requests`: parked (nobody has taken it yet), or claimed by an app.
    const state = r.state === 'claimed' ? `claimed by ${appLabel(r.claimed_by)}` : 'parked';
    return el('tr', { 'data-id': r.id },
      el('td', { 'data-label': 'Tool', title: `group ${r.group} · ${r.id}` }, el('code', { text: r.tool })),
      el('td', { 'data-label': 'Agent', text: r.agent }),
      el('td', { 'data-label': 'State', class: `state ${r.state}`, text: state }),
      el('td', { 'data-label': 'Age', class: 'age', 'data-age': r.age_s }),
      el('td', { 'data-label': 'Arguments', class: 'args', text: r.arguments_preview }),
      el('td', { class: 'actions' }, cancel));
  });
  fill($('calls'), rows, 'no-calls');
}

// The last ended calls, fetched again after each snapshot (a call that ended changed the
// snapshot, and the broker answers this read after writing that call). One fetch at a time;
// a snapshot that arrives meanwhile asks for one more.
let historyBusy = false;
let historyAgain = false;

async function refreshHistory() {
  if (historyBusy) {
    historyAgain = true;
    return;
  }
  historyBusy = true;
  try {
    do {
      historyAgain = false;
      const response = await fetch('/console/history');
      if (response.ok) renderHistory((await response.json()).data.calls);
    } while (historyAgain);
  } catch {
    // The stream's own error handling reconnects; the next snapshot tries again.
  } finally {
    historyBusy = false;
  }
}

// A duration in milliseconds as `leo requests --ended` prints it: `340ms`, `2.5s`, `2m10s`.
function formatMillis(ms) {
  if (ms < 1000) return `${ms}ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)}s`;
  return formatAge(ms / 1000);
}

// The outcome in the CLI's words: `result`, `error CODE`, `cancelled (REASON)`, `timeout`.
function outcomeText(c) {
  if (c.error_code) return `error ${c.error_code}`;
  if (c.reason && c.outcome !== 'timeout') return `${c.outcome} (${c.reason})`;
  return c.outcome;
}

function renderHistory(calls) {
  const rows = calls.map((c) =>
    el('tr', { 'data-id': c.id },
      el('td', { 'data-label': 'Tool', title: `group ${c.group} · ${c.id}` }, el('code', { text: c.tool })),
      el('td', { 'data-label': 'Agent', text: c.agent }),
      el('td', { 'data-label': 'Outcome', class: `outcome ${c.outcome}`, text: outcomeText(c) }),
      el('td', { 'data-label': 'Duration', class: 'duration', text: formatMillis(c.duration_ms) }),
      el('td', { 'data-label': 'Ended', 'data-since': c.ended_at })));
  fill($('history-rows'), rows, 'no-history');
  tick();
}

// A held definition's Approve button: agents are offered the new definition once pressed.
function approveButton(name) {
  const approve = el('button', { type: 'button', class: 'approve', text: 'Approve' });
  approve.addEventListener('click', async () => {
    approve.disabled = true;
    try {
      await post(`/console/tools/${encodeURIComponent(name)}/approve`, {});
      notice('');
    } catch (error) {
      notice(error.message);
      approve.disabled = false;
    }
  });
  return approve;
}

function toolItem(t) {
  const classes = [t.changed_at ? 'changed' : '', t.awaiting_approval ? 'held' : ''].join(' ').trim();
  const item = el('li', { 'data-tool': t.name, class: classes },
    el('code', { text: t.name }), ' ',
    el('span', { class: 'desc', text: t.description }), ' ',
    el('span', { class: 'muted', text: `(timeout ${formatTimeout(t.timeout_s)})` }));
  if (t.agents) item.append(' ', el('span', { class: 'muted scope', text: `for ${t.agents.join(', ')}` }));
  if (t.awaiting_approval) {
    item.append(' ', el('span', { class: 'badge', text: 'changed definition awaits approval' }), ' ', approveButton(t.name));
  } else if (t.changed_at) {
    item.append(' ', el('span', { class: 'badge', text: 'definition changed' }), ' ', el('span', { class: 'muted', 'data-since': t.changed_at }));
  }
  return item;
}

function renderTools() {
  const groups = Object.entries(status.tools_by_group || {});
  const warnings = status.warnings || {};
  $('groups').replaceChildren(...groups.map(([group, tools]) =>
    el('div', { class: 'group', 'data-group': group },
      el('h3', { text: group }),
      el('ul', {}, ...tools.map(toolItem)),
      ...(warnings[group] || []).map((w) => el('p', { class: 'warning', text: w })))));
  $('no-tools').hidden = groups.length > 0;
}

// A webhook provider's health: a warning line when its deliveries keep failing.
function webhookHealth(a) {
  const w = a.webhook;
  if (!w || w.health.healthy) return [];
  const why = w.health.last_error || 'deliveries fail';
  return [el('p', { class: 'warning', text: `unhealthy webhook (${w.health.failures} failed): ${why}` })];
}

// In a cluster, the instance a client is connected through (absent: the leader itself).
function through(text, via) {
  return via ? `${text} through ${via}` : text;
}

function renderApps() {
  const rows = status.apps.map((a) =>
    el('tr', { 'data-client': a.client_id },
      el('td', { 'data-label': 'Client' }, el('code', { text: a.client_id })),
      el('td', { 'data-label': 'Name', class: 'name', text: a.name || '—' }),
      el('td', { 'data-label': 'Who', text: through(a.provider ? a.principal : `${a.principal} (watching)`, a.via) },
        ...webhookHealth(a)),
      el('td', { 'data-label': 'Groups', text: (a.groups || []).join(', ') || '—' }),
      el('td', { 'data-label': 'Connected', 'data-since': a.connected_at })));
  fill($('app-rows'), rows, 'no-apps');
}

function renderAgents() {
  const rows = status.agents.map((s) =>
    el('tr', { 'data-agent': s.agent },
      el('td', { 'data-label': 'Agent', text: s.agent }),
      el('td', { 'data-label': 'Harness', text: s.harness ? `${s.harness.name} ${s.harness.version}`.trim() : 'not known yet' }),
      el('td', { 'data-label': 'Mode', text: s.mode }),
      el('td', { 'data-label': 'Via', text: through(s.transport || 'stdio', s.via) }),
      el('td', { 'data-label': 'Session' }, el('code', { text: s.session })),
      el('td', { 'data-label': 'Connected', 'data-since': s.connected_at })));
  fill($('agent-rows'), rows, 'no-agents');
}

// ----- controls -----

$('ask-switch').addEventListener('change', async (event) => {
  const toggle = event.target;
  const on = toggle.checked;
  toggle.disabled = true;
  try {
    toggle.checked = (await post('/console/ask-human', { on })).on;
    notice('');
  } catch (error) {
    toggle.checked = !on;
    notice(error.message);
  } finally {
    toggle.disabled = false;
  }
});

$('logout').addEventListener('click', async () => {
  try {
    await post('/logout', {});
  } finally {
    location.assign('/login');
  }
});

connect();
