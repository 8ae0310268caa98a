// The scripted Messages API of ../fake-anthropic.mjs, asking for the feature tools of
// features_app.py instead of the probe's: mcp__leo__record (structured result), deploy
// (progress), confirm (a question for the user), in that order. Every tool result the harness
// passes back is recorded in $HARNESS_PROBE_OUT (`model_saw`, text up to 400 characters), so
// the record shows what the model was given.
import { spawn } from 'node:child_process';
import { appendFileSync } from 'node:fs';
import { createServer } from 'node:http';

const sep = process.argv.indexOf('--');
const command = sep >= 0 ? process.argv.slice(sep + 1) : [];
if (command.length === 0) {
  console.error('usage: node fake-anthropic.mjs -- <command…>');
  process.exit(2);
}
const out = process.env.HARNESS_PROBE_OUT;
const graceMs = Number(process.env.HARNESS_PROBE_GRACE_MS ?? 5000);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
function side(event, fields) {
  if (!out) return;
  appendFileSync(out, JSON.stringify({ source: 'model', unix_ms: Date.now(), event, ...fields }) + '\n');
}

const probeName = (name) => {
  const m = /mcp__leo__(record|deploy|confirm)$/.exec(name ?? "");
  return m ? m[1] : null;
};
const called = new Set();
let first = true;
const toolUseIds = new Map();
const reported = new Set();
const offeredSeen = new Set();

function summarise(body) {
  const offered = (body.tools ?? []).map((t) => t.name).filter((n) => probeName(n));
  const results = [];
  for (const msg of body.messages ?? []) {
    if (!Array.isArray(msg.content)) continue;
    for (const block of msg.content) {
      if (block.type !== 'tool_result' || reported.has(block.tool_use_id)) continue;
      reported.add(block.tool_use_id);
      const tool = toolUseIds.get(block.tool_use_id) ?? null;
      const content = Array.isArray(block.content) ? block.content : [{ type: 'text', text: String(block.content ?? '') }];
      results.push({
        tool,
        is_error: block.is_error === true,
        blocks: content.map((c) => (c.type === 'text' ? { type: 'text', text: String(c.text).slice(0, 400) } : { type: c.type, media_type: c.source?.media_type })),
      });
    }
  }
  return { offered, results };
}

function reply(body) {
  const offered = (body.tools ?? []).map((t) => t.name);
  const pick = (short) => offered.find((n) => probeName(n) === short && !called.has(short));
  const next = pick('record') ?? pick('deploy') ?? pick('confirm');
  if (next) {
    called.add(probeName(next));
    const id = `toolu_probe_${called.size}`;
    toolUseIds.set(id, probeName(next));
    return { stop_reason: 'tool_use', content: [{ type: 'tool_use', id, name: next, input: {} }] };
  }
  return { stop_reason: 'end_turn', content: [{ type: 'text', text: 'Done: the probe tools were called.' }] };
}

function sendStream(res, message) {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  const ev = (type, data) => res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`);
  ev('message_start', { message: { ...message, content: [], stop_reason: null } });
  message.content.forEach((block, index) => {
    if (block.type === 'text') {
      ev('content_block_start', { index, content_block: { type: 'text', text: '' } });
      ev('content_block_delta', { index, delta: { type: 'text_delta', text: block.text } });
    } else {
      ev('content_block_start', { index, content_block: { ...block, input: {} } });
      ev('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: JSON.stringify(block.input) } });
    }
    ev('content_block_stop', { index });
  });
  ev('message_delta', { delta: { stop_reason: message.stop_reason, stop_sequence: null }, usage: { output_tokens: 5 } });
  ev('message_stop', {});
  res.end();
}

const server = createServer(async (req, res) => {
  let raw = '';
  for await (const chunk of req) raw += chunk;
  const path = req.url.split('?')[0];
  if (req.method === 'POST' && path.endsWith('/v1/messages/count_tokens')) {
    res.writeHead(200, { 'content-type': 'application/json' });
    return res.end(JSON.stringify({ input_tokens: 100 }));
  }
  if (req.method !== 'POST' || !path.endsWith('/v1/messages')) {
    side('model_other_request', { method: req.method, path });
    res.writeHead(404, { 'content-type': 'application/json' });
    return res.end(JSON.stringify({ type: 'error', error: { type: 'not_found_error', message: 'fake API' } }));
  }
  let body = {};
  try {
    body = JSON.parse(raw);
  } catch {}
  const hasTools = (body.tools ?? []).length > 0;
  const summary = summarise(body);
  // One record per distinct set of probe tools offered, not one per request.
  const offeredKey = summary.offered.join(',');
  if (!offeredSeen.has(offeredKey)) {
    offeredSeen.add(offeredKey);
    side('model_offered', { probe_tools_offered: summary.offered, tools_offered: (body.tools ?? []).slice(0, 60).map((t) => t.name ?? t.type) });
  }
  for (const r of summary.results) {
    if (r.tool) side('model_saw', { tool: r.tool, is_error: r.is_error, blocks: r.blocks });
  }
  // Side requests (titles, summaries) carry no tools: answer them at once.
  let result = { stop_reason: 'end_turn', content: [{ type: 'text', text: 'ok' }] };
  if (hasTools) {
    if (first) {
      first = false;
      await sleep(graceMs + 3000);
    }
    result = reply(body);
  }
  const message = {
    id: `msg_probe_${Date.now()}`,
    type: 'message',
    role: 'assistant',
    model: body.model ?? 'fake',
    stop_sequence: null,
    usage: { input_tokens: 100, output_tokens: 5 },
    ...result,
  };
  if (body.stream) return sendStream(res, message);
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify(message));
});

server.listen(0, '127.0.0.1', () => {
  const { port } = server.address();
  const child = spawn(command[0], command.slice(1), {
    stdio: 'inherit',
    env: {
      ...process.env,
      ANTHROPIC_BASE_URL: `http://127.0.0.1:${port}`,
      ANTHROPIC_API_KEY: process.env.ANTHROPIC_API_KEY ?? 'sk-ant-fake-harness-probe',
    },
  });
  child.on('exit', (code, signal) => {
    server.close();
    process.exit(code ?? (signal ? 1 : 0));
  });
  for (const s of ['SIGTERM', 'SIGINT']) process.on(s, () => child.kill(s));
});
