// A scripted stand-in for the OpenAI Chat Completions and Responses APIs on loopback, so
// opencode and codex can run a real session (and keep their MCP connections open) with no
// account:
//
//   node fake-openai.mjs -- <command…>
//
// Starts the fake API on 127.0.0.1 (a free port) and runs the command with FAKE_MODEL_URL
// (http://127.0.0.1:PORT/v1) and OPENAI_API_KEY set; `{model_url}` in the command's arguments is
// replaced too. It exits with the command's status. The "model" waits HARNESS_PROBE_GRACE_MS
// + 3 s before its first answer (so a client that does not re-list has stayed connected past the
// grace window), then asks for the script's tools in turn (fake-script.mjs: by default the
// probe's probe_new_tool if it was offered, probe_image, probe_error; features/measure.sh names
// its own), then ends the turn. What it was offered and what came back as tool
// results are appended to $HARNESS_PROBE_OUT as `source: model` records.
import { spawn } from 'node:child_process';
import { appendFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { argsOf, graceMs, nextTool, shortName, textMax } from './fake-script.mjs';

const sep = process.argv.indexOf('--');
const command = sep >= 0 ? process.argv.slice(sep + 1) : [];
if (command.length === 0) {
  console.error('usage: node fake-openai.mjs -- <command…>');
  process.exit(2);
}
const out = process.env.HARNESS_PROBE_OUT;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
function side(event, fields) {
  if (!out) return;
  appendFileSync(out, JSON.stringify({ source: 'model', unix_ms: Date.now(), event, ...fields }) + '\n');
}

const called = new Set();
const callIds = new Map();
const reported = new Set();
const offeredSeen = new Set();
let first = true;

function noteOffered(names) {
  const offered = names.filter((n) => shortName(n));
  const key = offered.join(',');
  if (!offeredSeen.has(key)) {
    offeredSeen.add(key);
    side('model_offered', { probe_tools_offered: offered, tools_offered: names.slice(0, 60) });
  }
}

function noteResult(callId, output) {
  if (reported.has(callId) || !callIds.has(callId)) return;
  reported.add(callId);
  let blocks;
  if (Array.isArray(output)) {
    blocks = output.map((c) =>
      c.type === 'text' || c.type === 'input_text' || c.type === 'output_text'
        ? { type: c.type, text: String(c.text).slice(0, textMax) }
        : { type: c.type },
    );
  } else {
    blocks = [{ type: 'string', text: String(output ?? '').slice(0, Math.max(300, textMax)) }];
  }
  side('model_saw', { tool: callIds.get(callId), blocks });
}

function nextCall(names) {
  const next = nextTool(names, called);
  if (!next) return null;
  called.add(next.short);
  const id = `call_probe_${called.size}`;
  callIds.set(id, next.short);
  return { id, name: next.name, args: JSON.stringify(argsOf(next.short)) };
}

async function decide(names) {
  if (names.length === 0) return null;
  if (first) {
    first = false;
    await sleep(graceMs + 3000);
  }
  return nextCall(names);
}

async function chat(body, res) {
  const names = (body.tools ?? []).map((t) => t.function?.name ?? t.name).filter(Boolean);
  noteOffered(names);
  for (const m of body.messages ?? []) {
    if (m.role === 'tool') noteResult(m.tool_call_id, m.content);
  }
  const call = await decide(names);
  const id = `chatcmpl-probe-${Date.now()}`;
  const created = Math.floor(Date.now() / 1000);
  const model = body.model ?? 'fake';
  const message = call
    ? { role: 'assistant', content: null, tool_calls: [{ id: call.id, type: 'function', function: { name: call.name, arguments: call.args } }] }
    : { role: 'assistant', content: 'Done: the probe tools were called.' };
  const finish = call ? 'tool_calls' : 'stop';
  if (!body.stream) {
    res.writeHead(200, { 'content-type': 'application/json' });
    return res.end(JSON.stringify({ id, object: 'chat.completion', created, model, choices: [{ index: 0, message, finish_reason: finish }], usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 } }));
  }
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  const chunk = (delta, finish_reason = null, extra = {}) =>
    res.write(`data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model, choices: [{ index: 0, delta, finish_reason }], ...extra })}\n\n`);
  if (call) {
    chunk({ role: 'assistant', content: null, tool_calls: [{ index: 0, id: call.id, type: 'function', function: { name: call.name, arguments: '' } }] });
    chunk({ tool_calls: [{ index: 0, function: { arguments: call.args } }] });
  } else {
    chunk({ role: 'assistant', content: message.content });
  }
  chunk({}, finish, { usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 } });
  res.write('data: [DONE]\n\n');
  res.end();
}

async function responses(body, res) {
  // codex groups an MCP server's tools in a `namespace` tool; a call names the namespace.
  const names = [];
  const namespaceOf = new Map();
  for (const t of body.tools ?? []) {
    if (t.type === 'namespace') {
      for (const inner of t.tools ?? []) {
        names.push(inner.name);
        namespaceOf.set(inner.name, t.name);
      }
    } else if (t.name ?? t.function?.name) {
      names.push(t.name ?? t.function?.name);
    }
  }
  noteOffered(names);
  for (const item of Array.isArray(body.input) ? body.input : []) {
    if (item.type === 'function_call_output') noteResult(item.call_id, item.output);
  }
  const call = await decide(names);
  const id = `resp_probe_${Date.now()}`;
  const item = call
    ? { type: 'function_call', id: `fc_${call.id}`, call_id: call.id, name: call.name, ...(namespaceOf.has(call.name) ? { namespace: namespaceOf.get(call.name) } : {}), arguments: call.args, status: 'completed' }
    : { type: 'message', id: `msg_${id}`, role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'Done: the probe tools were called.', annotations: [] }] };
  const usage = { input_tokens: 10, input_tokens_details: { cached_tokens: 0 }, output_tokens: 5, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 15 };
  const response = { id, object: 'response', created_at: Math.floor(Date.now() / 1000), status: 'completed', model: body.model ?? 'fake', output: [item], usage };
  if (!body.stream) {
    res.writeHead(200, { 'content-type': 'application/json' });
    return res.end(JSON.stringify(response));
  }
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  let seq = 0;
  const ev = (type, data) => res.write(`event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: seq++, ...data })}\n\n`);
  ev('response.created', { response: { ...response, status: 'in_progress', output: [] } });
  ev('response.output_item.added', { output_index: 0, item: { ...item, status: 'in_progress' } });
  if (!call) {
    ev('response.output_text.delta', { item_id: item.id, output_index: 0, content_index: 0, delta: item.content[0].text });
  }
  ev('response.output_item.done', { output_index: 0, item });
  ev('response.completed', { response });
  res.end();
}

const server = createServer(async (req, res) => {
  let raw = '';
  for await (const c of req) raw += c;
  const path = req.url.split('?')[0];
  let body = {};
  try {
    body = JSON.parse(raw);
  } catch {}
  if (req.method === 'POST' && path.endsWith('/chat/completions')) return chat(body, res);
  if (req.method === 'POST' && path.endsWith('/responses')) return responses(body, res);
  if (req.method === 'GET' && path.endsWith('/models')) {
    res.writeHead(200, { 'content-type': 'application/json' });
    return res.end(JSON.stringify({ object: 'list', data: [{ id: 'fake-model', object: 'model', owned_by: 'harness-probe' }] }));
  }
  side('model_other_request', { method: req.method, path });
  res.writeHead(404, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ error: { message: 'fake API: not found', type: 'invalid_request_error' } }));
});

server.listen(0, '127.0.0.1', () => {
  const url = `http://127.0.0.1:${server.address().port}/v1`;
  const args = command.map((a) => a.replaceAll('{model_url}', url));
  const child = spawn(args[0], args.slice(1), {
    stdio: 'inherit',
    env: { ...process.env, FAKE_MODEL_URL: url, OPENAI_API_KEY: process.env.OPENAI_API_KEY ?? 'sk-fake-harness-probe' },
  });
  child.on('exit', (code, signal) => {
    server.close();
    process.exit(code ?? (signal ? 1 : 0));
  });
  for (const s of ['SIGTERM', 'SIGINT']) process.on(s, () => child.kill(s));
});
