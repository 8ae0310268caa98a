// A scripted stand-in for the Anthropic Messages API on loopback, so Claude Code can run a real
// session (and keep its MCP connection open) with no account:
//
//   node fake-anthropic.mjs -- claude -p "…" --mcp-config {mcp_config} --strict-mcp-config
//
// Starts the fake API on 127.0.0.1 (a free port), runs the command with ANTHROPIC_BASE_URL
// pointing at it and a dummy ANTHROPIC_API_KEY, and exits with the command's status. The "model"
// waits HARNESS_PROBE_GRACE_MS + 3 s before its first answer (so a client that does not re-list
// has stayed connected past the grace window), then asks for the script's tools in turn
// (fake-script.mjs: by default the probe's probe_new_tool if it was offered, probe_image,
// probe_error; features/measure.sh names its own), then ends the turn. Every request
// is summarised in $HARNESS_PROBE_OUT as a `source: model` record: which probe tools were
// offered, and what came back as tool results (the image and the tool error, as the harness
// passed them on); the first request that offers tools is also recorded as `model_asked`, with
// the text blocks of its user messages (what a prompt command, say, put there).
import { spawn } from 'node:child_process';
import { appendFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { argsOf, graceMs, nextTool, shortName, textMax } from './fake-script.mjs';

const sep = process.argv.indexOf('--');
const command = sep >= 0 ? process.argv.slice(sep + 1) : [];
if (command.length === 0) {
  console.error('usage: node fake-anthropic.mjs -- <command…>');
  process.exit(2);
}
const out = process.env.HARNESS_PROBE_OUT;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
function side(event, fields) {
  if (!out) return;
  appendFileSync(out, JSON.stringify({ source: 'model', unix_ms: Date.now(), event, ...fields }) + '\n');
}

const called = new Set();
let first = true;
const toolUseIds = new Map();
const reported = new Set();
const offeredSeen = new Set();

let asked = false;

/** The texts of the user messages of a request: string contents and text blocks. */
function userTexts(body) {
  return (body.messages ?? [])
    .filter((m) => m.role === 'user')
    .flatMap((m) => (typeof m.content === 'string' ? [m.content] : (m.content ?? []).filter((b) => b.type === 'text').map((b) => String(b.text))));
}

function summarise(body) {
  const offered = (body.tools ?? []).map((t) => t.name).filter((n) => shortName(n));
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
        blocks: content.map((c) => (c.type === 'text' ? { type: 'text', text: String(c.text).slice(0, textMax) } : { type: c.type, media_type: c.source?.media_type })),
      });
    }
  }
  return { offered, results };
}

function reply(body) {
  const offered = (body.tools ?? []).map((t) => t.name);
  const next = nextTool(offered, called);
  if (next) {
    called.add(next.short);
    const id = `toolu_probe_${called.size}`;
    toolUseIds.set(id, next.short);
    return { stop_reason: 'tool_use', content: [{ type: 'tool_use', id, name: next.name, input: argsOf(next.short) }] };
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
  if (hasTools && !asked) {
    asked = true;
    side('model_asked', { texts: userTexts(body).map((t) => t.slice(0, textMax)) });
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
