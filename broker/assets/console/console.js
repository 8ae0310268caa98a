// The Leo console's one script. It keeps a live view of the broker from the `status`
// snapshots of /console/events and sends a few POSTs, each with the session's CSRF token.
// No framework: the DOM is built with createElement and textContent, never from HTML strings,
// so nothing an app or an agent sends can become markup.
'use strict';

const csrf = document.querySelector('meta[name="leo-csrf"]').content;
const SVG = 'http://www.w3.org/2000/svg';
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

// svgEl('rect', {x: 1, y: 2, …}): an SVG element with its attributes.
function svgEl(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  node.append(...children);
  return node;
}

// Replaces a table body's rows and shows its "none" line when there are none.
function fill(tbody, rows, emptyId) {
  tbody.replaceChildren(...rows);
  $(emptyId).hidden = rows.length > 0;
}

// Long words (ids, and names that apps and agents chose) are shown shortened in their middle
// and whole on hover, so that a table never has to break a word to fit its card; ids, which
// an operator pastes into `leo` commands, have a button that copies them: `c_3f2a91…e07b`.
const ID_CHARS = 12;
const NAME_CHARS = 14;

function shorten(text, max) {
  if (text.length <= max) return text;
  const head = Math.ceil((max - 1) * 0.6);
  return `${text.slice(0, head)}…${text.slice(text.length - (max - 1 - head))}`;
}

function copyButton(text) {
  const button = el('button', { type: 'button', class: 'copy', title: `Copy ${text}` });
  button.setAttribute('aria-label', `Copy ${text}`);
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('viewBox', '0 0 16 16');
  svg.setAttribute('aria-hidden', 'true');
  for (const [x, y] of [[5, 1], [1, 5]]) {
    svg.append(svgEl('rect', { x, y, width: 10, height: 10, rx: 2 }));
  }
  button.append(svg);
  button.addEventListener('click', async () => {
    try {
      await navigator.clipboard.writeText(text);
      button.dataset.copied = 'yes';
      setTimeout(() => { delete button.dataset.copied; }, 1500);
    } catch {
      notice(`Could not copy; the whole value is ${text}`);
    }
  });
  return button;
}

// A word that must stay whole: `word(id, {id: true})` for an id, `word(name)` for a name.
function word(value, { id = false, code = id, max = id ? ID_CHARS : NAME_CHARS } = {}) {
  const text = String(value);
  const short = shorten(text, max);
  const shown = el(code ? 'code' : 'span', { class: 'word', text: short, 'data-full': text });
  if (short !== text) shown.title = text;
  if (!id) return shown;
  return el('span', { class: 'word-copy' }, shown, copyButton(text));
}

// `n app(s)`, as `leo status` counts.
function count(n, what) {
  return `${n} ${what}${n === 1 ? '' : 's'}`;
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

// An app as the CLI shows it: its name if it gave one, and its client id.
function appLabel(clientId) {
  const app = (status.apps || []).find((a) => a.client_id === clientId);
  const id = word(clientId, { id: true });
  return app && app.name ? [word(app.name), ' (', id, ')'] : [id];
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
  refreshApprovals();
  renderAsk();
  renderCalls();
  renderInstances();
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
    // The words of `leo requests`: awaiting approval, parked (nobody has taken it yet), or
    // claimed by an app.
    const state = r.state === 'claimed' ? ['claimed by ', ...appLabel(r.claimed_by)]
      : [r.state === 'awaiting_approval' ? 'awaiting approval' : 'parked'];
    return el('tr', { 'data-id': r.id },
      el('td', { 'data-label': 'Tool', title: `group ${r.group} · ${r.id}` }, word(r.tool, { code: true })),
      el('td', { 'data-label': 'Agent' }, word(r.agent)),
      el('td', { 'data-label': 'State', class: `state ${r.state}` }, ...state),
      el('td', { 'data-label': 'Age', class: 'age', 'data-age': r.age_s }),
      el('td', { 'data-label': 'Arguments', class: 'args', text: inert(r.arguments_preview) }),
      el('td', { class: 'actions' }, cancel));
  });
  fill($('calls'), rows, 'no-calls');
}

// ----- approvals -----

// Text an agent chose, made inert for a person to read: it is only ever set as textContent (so
// markup stays text), and every control, invisible or direction-changing character is
// written as its escape (`\u001b`), so a terminal sequence or a reordering mark shows as
// what it is instead of changing what is shown around it.
const INVISIBLE = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u00ad\u061c\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]/g;

function inert(text) {
  return String(text).replace(INVISIBLE, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

// The arguments as indented JSON (which already escapes C0 controls inside strings).
function argumentsText(args) {
  return inert(JSON.stringify(args, null, 2));
}

// The calls awaiting approval, fetched again after each snapshot (a call that starts or stops
// awaiting changes the snapshot). One fetch at a time; a snapshot meanwhile asks for one more.
let approvalsBusy = false;
let approvalsAgain = false;

async function refreshApprovals() {
  if (approvalsBusy) {
    approvalsAgain = true;
    return;
  }
  approvalsBusy = true;
  try {
    do {
      approvalsAgain = false;
      const response = await fetch('/console/approvals');
      if (response.ok) renderApprovals((await response.json()).data.approvals);
    } while (approvalsAgain);
  } catch {
    // The stream's own error handling reconnects; the next snapshot tries again.
  } finally {
    approvalsBusy = false;
  }
}

// Keyed by request id, so a half-typed reason or edit survives the next refresh.
function renderApprovals(approvals) {
  const list = $('approval-list');
  const awaiting = new Map(approvals.map((a) => [a.id, a]));
  for (const item of [...list.children]) {
    const a = awaiting.get(item.dataset.id);
    if (!a || a.digest !== item.dataset.digest) item.remove();
  }
  const shown = new Set([...list.children].map((item) => item.dataset.id));
  for (const a of approvals) {
    if (!shown.has(a.id)) list.append(approvalItem(a));
  }
  $('no-approvals').hidden = approvals.length > 0;
  tick();
}

function approvalItem(a) {
  const item = el('li', { class: 'approval', 'data-id': a.id, 'data-digest': a.digest });
  const expires = new Date(a.expires_at).toLocaleTimeString();
  item.append(
    el('p', { class: 'what' },
      word(a.agent), ' calls ', word(a.tool, { code: true }),
      el('span', { class: 'muted', text: ` (group ${inert(a.group)})` })),
    el('pre', { class: 'arguments', text: argumentsText(a.arguments) }),
    el('p', { class: 'meta' },
      'asked by ', word(a.agent), ' · session ', word(a.session, { id: true }),
      ' · since ', el('span', { 'data-since': a.requested_at }),
      ` · expires at ${expires}`,
      ` · required by ${a.required_by === 'tool' ? 'the app' : 'the operator\'s config'}`,
      ' · ', word(a.id, { id: true })),
  );
  const controls = el('div', { class: 'decide' });
  const approve = el('button', { type: 'button', class: 'approve', text: 'Approve' });
  approve.addEventListener('click', () => decide(item, a, 'approve', { digest: a.digest }));
  controls.append(approve);
  if (a.editable) {
    const editor = el('textarea', { name: 'arguments', rows: 4, hidden: true, value: JSON.stringify(a.arguments, null, 2) });
    const edit = el('button', { type: 'button', class: 'edit', text: 'Edit arguments' });
    const send = el('button', { type: 'button', class: 'approve-edited', text: 'Approve with these arguments', hidden: true });
    edit.addEventListener('click', () => {
      editor.hidden = false;
      send.hidden = false;
      edit.hidden = true;
      editor.focus();
    });
    send.addEventListener('click', () => {
      let args;
      try {
        args = JSON.parse(editor.value);
      } catch (error) {
        notice(`The arguments are not JSON: ${error.message}`);
        return;
      }
      decide(item, a, 'approve', { digest: a.digest, arguments: args });
    });
    controls.append(edit, editor, send);
  }
  const reason = el('input', { type: 'text', name: 'reason', placeholder: 'Reason (optional)', maxLength: 1024 });
  const deny = el('button', { type: 'button', class: 'danger deny', text: 'Deny' });
  deny.addEventListener('click', () => {
    const body = { digest: a.digest };
    if (reason.value.trim()) body.reason = reason.value;
    decide(item, a, 'deny', body);
  });
  controls.append(reason, deny);
  item.append(controls);
  return item;
}

async function decide(item, a, action, body) {
  const controls = item.querySelectorAll('button, input, textarea');
  controls.forEach((c) => { c.disabled = true; });
  try {
    await post(`/console/approvals/${encodeURIComponent(a.id)}/${action}`, body);
    notice('');
    item.remove();
    $('no-approvals').hidden = $('approval-list').children.length > 0;
  } catch (error) {
    notice(error.message);
    controls.forEach((c) => { c.disabled = false; });
  }
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
      if (response.ok) {
        const { calls, per_minute: perMinute } = (await response.json()).data;
        renderHistory(calls);
        renderChart(perMinute);
      }
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
      el('td', { 'data-label': 'Tool', title: `group ${c.group} · ${c.id}` }, word(c.tool, { code: true })),
      el('td', { 'data-label': 'Agent' }, word(c.agent)),
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
  if (t.needs_approval) item.append(' ', el('span', { class: 'badge approval', text: 'needs approval' }));
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
function through(nodes, via) {
  return via ? [...nodes, ' through ', word(via, { id: true })] : nodes;
}

// Names separated by commas, each a whole word.
function words(names) {
  if (!names.length) return ['—'];
  return names.flatMap((n, i) => (i ? [', ', word(n)] : [word(n)]));
}

function renderApps() {
  const rows = status.apps.map((a) =>
    el('tr', { 'data-client': a.client_id },
      el('td', { 'data-label': 'Client' }, word(a.client_id, { id: true })),
      el('td', { 'data-label': 'Name', class: 'name' }, a.name ? word(a.name) : '—'),
      el('td', { 'data-label': 'Who' },
        ...through([word(a.principal), ...(a.provider ? [] : [' (watching)'])], a.via),
        ...webhookHealth(a)),
      el('td', { 'data-label': 'Groups' }, ...words(a.groups || [])),
      el('td', { 'data-label': 'Connected', 'data-since': a.connected_at })));
  fill($('app-rows'), rows, 'no-apps');
}

function renderAgents() {
  const rows = status.agents.map((s) =>
    el('tr', { 'data-agent': s.agent },
      el('td', { 'data-label': 'Agent' }, word(s.agent)),
      el('td', { 'data-label': 'Harness' }, ...(s.harness ? [word(s.harness.name), ' ', word(s.harness.version)] : ['not known yet'])),
      el('td', { 'data-label': 'Mode', text: s.mode }),
      el('td', { 'data-label': 'Via' }, ...through([s.transport || 'stdio'], s.via)),
      el('td', { 'data-label': 'Session' }, word(s.session, { id: true })),
      el('td', { 'data-label': 'Connected', 'data-since': s.connected_at })));
  fill($('agent-rows'), rows, 'no-agents');
}

// A cluster's instances, as `leo status` lists them: role, when each last said it was alive
// (ticking), and how many apps and agents are connected through each.
function renderInstances() {
  const instances = status.instances || [];
  $('instances').hidden = instances.length === 0;
  const rows = instances.map((i) => {
    const here = (via) => (via ? via === i.id : i.role === 'leader');
    const apps = status.apps.filter((a) => here(a.via)).length;
    const agents = status.agents.filter((s) => here(s.via)).length;
    return el('tr', { 'data-instance': i.id },
      el('td', { 'data-label': 'Instance' }, word(i.id, { id: true })),
      el('td', { 'data-label': 'Role', class: `role ${i.role}`, text: i.role }),
      el('td', { 'data-label': 'Host' }, word(i.host),
        ...(i.url ? [el('br'), el('span', { class: 'muted url' }, word(i.url, { code: true, max: 26 }))] : [])),
      el('td', { 'data-label': 'Seen', 'data-since': i.last_seen }),
      el('td', { 'data-label': 'Here', class: 'here', text: `${count(apps, 'app')} · ${count(agents, 'agent')}` }));
  });
  $('instance-rows').replaceChildren(...rows);
}

// The chart of the last hour: one stacked bar per minute, one colour per outcome, drawn as
// SVG from `per_minute` of /console/history (the broker's history, so a restart keeps it
// and every instance of a cluster shows the same). Each bar's title says its minute's counts.
const OUTCOMES = ['result', 'error', 'timeout', 'cancelled', 'no_client'];
const CHART = { width: 600, height: 100 };

function renderChart(perMinute) {
  const minutes = perMinute || [];
  const total = (m) => OUTCOMES.reduce((sum, o) => sum + m[o], 0);
  const peak = Math.max(1, ...minutes.map(total));
  const step = CHART.width / Math.max(1, minutes.length);
  const bars = minutes.map((m, n) => {
    let y = CHART.height;
    const parts = OUTCOMES.filter((o) => m[o] > 0).map((o) => {
      const h = (m[o] / peak) * CHART.height;
      y -= h;
      return svgEl('rect', { class: o, x: n * step + 1, y, width: step - 2, height: h });
    });
    const at = new Date(m.at).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
    const said = OUTCOMES.filter((o) => m[o] > 0).map((o) => `${m[o]} ${o}`).join(', ') || 'no calls';
    return svgEl('g', { 'data-at': m.at }, svgEl('title', {}, `${at}: ${said}`), ...parts);
  });
  const chart = $('chart');
  chart.setAttribute('viewBox', `0 0 ${CHART.width} ${CHART.height}`);
  chart.replaceChildren(svgEl('line', { class: 'axis', x1: 0, y1: CHART.height, x2: CHART.width, y2: CHART.height }), ...bars);
  $('chart-peak').textContent = `peak ${peak}/min`;
  const sums = Object.fromEntries(OUTCOMES.map((o) => [o, minutes.reduce((sum, m) => sum + m[o], 0)]));
  $('legend').replaceChildren(...OUTCOMES.map((o) =>
    el('li', { 'data-outcome': o, 'data-count': sums[o], class: sums[o] ? '' : 'none' },
      el('span', { class: `swatch ${o}` }), `${o} `, el('b', { text: String(sums[o]) }))));
}
// The bars move on each minute even when no call ends.
setInterval(refreshHistory, 30_000);

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
