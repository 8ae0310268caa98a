// Reference client on the official TypeScript SDK (@modelcontextprotocol/sdk), for harness-probe.
//
//   node ts-client.mjs default|auto-refresh|ignore
//
// Launches `$HARNESS_PROBE_BIN serve` (harness-probe run sets it), lists tools, calls the image
// and error tools, then waits for notifications/tools/list_changed:
//   default       no listChanged option, no handler: what the SDK does by itself.
//   auto-refresh  the SDK's own `listChanged.tools` option (autoRefresh on, the SDK re-lists).
//   ignore        an explicit handler that drops the notification.
// What the SDK delivered is appended to $HARNESS_PROBE_OUT as `source: client` records.
import { appendFileSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

const mode = process.argv[2] ?? 'default';
if (!['default', 'auto-refresh', 'ignore'].includes(mode)) {
  console.error(`unknown mode ${mode}`);
  process.exit(2);
}
const here = dirname(fileURLToPath(import.meta.url));
const sdkVersion = JSON.parse(
  readFileSync(join(here, 'node_modules/@modelcontextprotocol/sdk/package.json'), 'utf8'),
).version;
const name = `harness-probe-ts-sdk-${mode}`;
const out = process.env.HARNESS_PROBE_OUT;
const bin = process.env.HARNESS_PROBE_BIN ?? 'harness-probe';
const graceMs = Number(process.env.HARNESS_PROBE_GRACE_MS ?? 5000);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function side(event, fields) {
  if (!out) return;
  const line = { source: 'client', unix_ms: Date.now(), event, client_name: name, ...fields };
  appendFileSync(out, JSON.stringify(line) + '\n');
}

let changed;
const changedOnce = new Promise((resolve) => (changed = resolve));
const options = {};
if (mode === 'auto-refresh') {
  options.listChanged = {
    tools: {
      onChanged: (error, tools) => {
        side('client_note', {
          text: error
            ? `the SDK's listChanged.tools refresh failed: ${error}`
            : `the SDK re-listed by itself (listChanged.tools, autoRefresh) and passed ${tools?.length} tools to onChanged`,
        });
        changed(tools ?? []);
      },
    },
  };
}
const client = new Client({ name, version: sdkVersion }, options);
if (mode === 'ignore') {
  client.setNotificationHandler(ToolListChangedNotificationSchema, async () => {
    side('client_note', { text: 'the script received notifications/tools/list_changed and ignored it' });
    changed(null);
  });
}
// The SDK passes only a few environment variables to the server by default; pass them all so
// the probe finds HARNESS_PROBE_OUT.
const transport = new StdioClientTransport({ command: bin, args: ['serve'], env: { ...process.env } });
await client.connect(transport);
await client.listTools();
for (const tool of ['probe_image', 'probe_error']) {
  try {
    const result = await client.callTool({ name: tool, arguments: {} });
    side('client_saw', {
      tool,
      content_types: result.content.map((c) => c.type),
      is_error: result.isError === true,
      note: 'the SDK returns the CallToolResult to the application as sent',
    });
  } catch (e) {
    side('client_saw', { tool, error: String(e), note: 'the SDK threw instead of returning a result' });
  }
}
if (mode === 'auto-refresh') {
  const tools = await Promise.race([changedOnce, sleep(20000).then(() => null)]);
  if (tools?.some((t) => t.name === 'probe_new_tool')) {
    await client.callTool({ name: 'probe_new_tool', arguments: {} });
  }
} else {
  if (mode === 'default') {
    side('client_note', { text: 'no listChanged option and no handler: whatever the SDK does by itself' });
  }
  await Promise.race([changedOnce, sleep(3000)]);
  await sleep(graceMs + 2000);
}
await client.close();
