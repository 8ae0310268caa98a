#!/usr/bin/env bash
# Regenerates the probe's measurements: testdata/probe/*.json (all but published.json, which is
# written by hand from changelogs and code) and, from them, testdata/harnesscaps.json.
#
#   harness-probe/clients/measure.sh                 # SDK reference clients and every harness CLI found
#   ONLY='codex-*' harness-probe/clients/measure.sh  # just the matching runs (then the table)
#
# Needs: the probe built (cargo build -p harness-probe; PROBE=path overrides), node with
# `npm ci --prefix harness-probe/clients`, python with `pip install -r
# harness-probe/clients/requirements.txt` (PYTHON=path overrides), and for the harness part the
# CLIs on PATH: claude (@anthropic-ai/claude-code), opencode (opencode-ai), codex (@openai/codex).
# A missing CLI is skipped with a note. No account is needed: sessions talk to the fake model
# servers in this directory, on loopback; every harness runs with a throw-away HOME or CODEX_HOME.
set -euo pipefail
cd "$(dirname "$0")/../.."
PROBE=${PROBE:-${CARGO_TARGET_DIR:-target}/debug/harness-probe}
PY=${PYTHON:-python3}
OUT=testdata/probe
C=harness-probe/clients
mkdir -p "$OUT"

run() {
  local name=$1
  shift
  # ONLY=GLOB re-measures just the runs whose verdict name matches.
  # shellcheck disable=SC2053
  if [[ -n "${ONLY:-}" && $name != $ONLY ]]; then
    return 0
  fi
  local dir
  dir=$(mktemp -d "${TMPDIR:-/tmp}/harness-probe-$name.XXXXXX")
  "$PROBE" run --dir "$dir" --log "$dir/client.log" --verdict "$OUT/$name.json" "$@"
}

# Reference clients: the SDKs, driven by the scripts in this directory.
run sdk-rmcp-relist --kind sdk --timeout 60 --how "rmcp 3.11 client (harness-probe rmcp-client --mode relist): on_tool_list_changed wakes the script, which lists again" -- '{bin}' rmcp-client --mode relist
run sdk-rmcp-ignore --kind sdk --timeout 60 --how "rmcp 3.11 client (harness-probe rmcp-client --mode ignore): the notification reaches on_tool_list_changed, the script does nothing" -- '{bin}' rmcp-client --mode ignore
run sdk-ts-default --kind sdk --timeout 60 --how "TypeScript SDK client, no listChanged option and no handler (ts-client.mjs default)" -- node "$C/ts-client.mjs" default
run sdk-ts-auto-refresh --kind sdk --timeout 60 --how "TypeScript SDK client with its listChanged.tools option; the SDK re-lists by itself (ts-client.mjs auto-refresh)" -- node "$C/ts-client.mjs" auto-refresh
run sdk-ts-ignore --kind sdk --timeout 60 --how "TypeScript SDK client with a handler that drops the notification (ts-client.mjs ignore)" -- node "$C/ts-client.mjs" ignore
run sdk-py-default --kind sdk --timeout 60 --how "Python SDK Client, legacy handshake, no message handler (py_client.py default)" -- "$PY" "$C/py_client.py" default
run sdk-py-relist --kind sdk --timeout 60 --how "Python SDK Client, legacy handshake; the script's message_handler lists again (py_client.py relist)" -- "$PY" "$C/py_client.py" relist
run sdk-py-ignore --kind sdk --timeout 60 --how "Python SDK Client, legacy handshake; the script's message_handler drops it (py_client.py ignore)" -- "$PY" "$C/py_client.py" ignore
run sdk-py-relist-modern --kind sdk --timeout 60 --how "Python SDK Client, mode=auto (2026-07-28), subscriptions/listen; the script lists again on each event (py_client.py relist-modern)" -- "$PY" "$C/py_client.py" relist-modern

# Harnesses.
if command -v claude >/dev/null; then
  v=$(claude --version | cut -d' ' -f1)
  run "claude-code-$v-mcp-list" --harness "Claude Code" --timeout 60 --how "claude mcp list (health check), server added with claude mcp add -s user under a throw-away HOME" -- \
    sh -c 'export HOME={dir}/home; mkdir -p "$HOME"; claude mcp add -s user probe -- {bin} serve --out {out} >/dev/null && claude mcp list'
  run "claude-code-$v-print" --harness "Claude Code" --timeout 120 --how "claude -p --mcp-config --strict-mcp-config against fake-anthropic.mjs (a scripted Messages API on loopback), default settings" -- \
    env HOME={dir}/home CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_TELEMETRY=1 node "$C/fake-anthropic.mjs" -- \
    claude -p "Call the probe tools." --mcp-config {mcp_config} --strict-mcp-config --allowedTools mcp__probe
  run "claude-code-$v-print-no-tool-search" --harness "Claude Code" --timeout 120 --how "claude -p --mcp-config --strict-mcp-config against fake-anthropic.mjs (a scripted Messages API on loopback), ENABLE_TOOL_SEARCH=false so the model is offered the MCP tools directly and calls them" -- \
    env HOME={dir}/home ENABLE_TOOL_SEARCH=false CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_TELEMETRY=1 node "$C/fake-anthropic.mjs" -- \
    claude -p "Call the probe tools." --mcp-config {mcp_config} --strict-mcp-config --allowedTools mcp__probe
else
  echo "measure: claude not on PATH; Claude Code skipped" >&2
fi
OC_ENV=(env HOME={dir}/home XDG_CONFIG_HOME={dir}/home/.config XDG_DATA_HOME={dir}/home/.local/share XDG_CACHE_HOME={dir}/home/.cache XDG_STATE_HOME={dir}/home/.local/state OPENCODE_DISABLE_AUTOUPDATE=1 OPENCODE_DISABLE_MODELS_FETCH=1 OPENCODE_DISABLE_DEFAULT_PLUGINS=1)
if command -v opencode >/dev/null; then
  v=$(opencode --version </dev/null)
  run "opencode-$v-mcp-list" --harness opencode --timeout 90 --how "opencode mcp list (connects and lists), OPENCODE_CONFIG with the probe, throw-away HOME" -- \
    "${OC_ENV[@]}" OPENCODE_CONFIG={opencode_config} sh -c 'mkdir -p "$HOME/proj" && cd "$HOME/proj" && opencode mcp list'
  run "opencode-$v-run" --harness opencode --timeout 120 --how "opencode run against fake-openai.mjs (an OpenAI-compatible provider on loopback), throw-away HOME" -- \
    "${OC_ENV[@]}" node "$C/fake-openai.mjs" -- sh -c "node '$C/opencode-fake-config.mjs' {opencode_config} {dir}/opencode-session.json && mkdir -p \"\$HOME/proj\" && cd \"\$HOME/proj\" && OPENCODE_CONFIG={dir}/opencode-session.json opencode run 'Call the probe tools.'"
  run "opencode-$v-run-early-notification" --harness opencode --timeout 120 --notify-delay-ms 100 --how "opencode run against fake-openai.mjs, notified 100 ms (not 1 s) after its first tools/list, while it is still starting" -- \
    "${OC_ENV[@]}" node "$C/fake-openai.mjs" -- sh -c "node '$C/opencode-fake-config.mjs' {opencode_config} {dir}/opencode-session.json && mkdir -p \"\$HOME/proj\" && cd \"\$HOME/proj\" && OPENCODE_CONFIG={dir}/opencode-session.json opencode run 'Call the probe tools.'"
else
  echo "measure: opencode not on PATH; opencode skipped" >&2
fi
if command -v codex >/dev/null; then
  v=$(codex --version | awk '{print $2}')
  run "codex-$v-exec" --harness codex --timeout 120 --how "codex exec against fake-openai.mjs (a Responses API on loopback), CODEX_HOME with the probe in config.toml" -- \
    env CODEX_HOME={codex_home} node "$C/fake-openai.mjs" -- codex exec --skip-git-repo-check -C {dir} \
    -c model_provider=fake -c 'model_providers.fake={name="fake",base_url="{model_url}",wire_api="responses",env_key="OPENAI_API_KEY"}' \
    -m fake-model -c approval_policy=never --dangerously-bypass-approvals-and-sandbox "Call the probe tools."
else
  echo "measure: codex not on PATH; codex skipped" >&2
fi

"$PROBE" table "$OUT"/*.json --write testdata/harnesscaps.json
echo "measure: wrote $OUT/*.json and testdata/harnesscaps.json" >&2
