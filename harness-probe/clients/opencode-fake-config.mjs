// Writes an opencode config for a session against fake-openai.mjs:
//
//   node opencode-fake-config.mjs IN.json OUT.json
//
// IN is the opencode.json harness-probe run generated (the probe as an MCP server); OUT adds a
// provider `fake` (OpenAI-compatible, baseURL $FAKE_MODEL_URL) and makes it the model.
import { readFileSync, writeFileSync } from 'node:fs';

const [input, output] = process.argv.slice(2);
const config = JSON.parse(readFileSync(input, 'utf8'));
config.provider = {
  fake: {
    npm: '@ai-sdk/openai-compatible',
    name: 'harness-probe fake model',
    options: { baseURL: process.env.FAKE_MODEL_URL, apiKey: 'sk-fake-harness-probe' },
    models: { 'fake-model': { name: 'fake-model', tool_call: true } },
  },
};
config.model = 'fake/fake-model';
config.small_model = 'fake/fake-model';
config.autoupdate = false;
config.share = 'disabled';
writeFileSync(output, JSON.stringify(config, null, 2) + '\n');
