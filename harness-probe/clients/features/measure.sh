#!/bin/sh
# Measures what Claude Code does with Leo's MCP features, with no account: a real broker and
# leo-mcp on a throw-away LEO_HOME, features_app.py as the app, and `claude -p` against the
# scripted Messages API, once on the initialize lifecycle and once with `leo-mcp --discover`.
#
#   harness-probe/clients/features/measure.sh [OUTDIR]
#
# Needs: leo and leo-mcp built (target/debug), node, python3, claude on PATH (for example
# testdata/harness-clis/node_modules/.bin). Writes per run: model-*.jsonl (what the model saw),
# app.log (what the app got back: progress acks, the question's answer), in-*.jsonl (what
# Claude Code sent leo-mcp), and prints a summary.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=${1:-$(mktemp -d)}
port=${LEO_PORT:-8371}
mkdir -p "$out/home"
export LEO_HOME="$out/leo" LEO_PORT="$port" FEATURES_LOG="$out/app.log"
"$root/target/debug/leo" broker --port "$port" >"$out/broker.log" 2>&1 &
broker=$!
trap 'kill $broker $app 2>/dev/null || true' EXIT
sleep 1
python3 "$here/features_app.py" >"$out/app.out" 2>&1 &
app=$!
sleep 1
cat >"$out/wrap.sh" <<WRAP
#!/bin/sh
tee -a "$out/in-\$\$.jsonl" | "$root/target/debug/leo-mcp" --agent claude "\$@" 2>>"$out/leo-mcp.log"
WRAP
chmod +x "$out/wrap.sh"
for lifecycle in initialize discover; do
  args='[]'
  [ "$lifecycle" = discover ] && args='["--discover"]'
  printf '{"mcpServers": {"leo": {"type": "stdio", "command": "%s", "args": %s}}}\n' "$out/wrap.sh" "$args" >"$out/mcp-$lifecycle.json"
  HOME="$out/home" HARNESS_PROBE_OUT="$out/model-$lifecycle.jsonl" HARNESS_PROBE_GRACE_MS=0 \
    ENABLE_TOOL_SEARCH=false CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_TELEMETRY=1 \
    node "$here/fake-anthropic-features.mjs" -- claude -p "Call the leo tools." \
    --mcp-config "$out/mcp-$lifecycle.json" --strict-mcp-config --allowedTools mcp__leo \
    >"$out/claude-$lifecycle.out" 2>&1
  echo "== claude $(claude --version | cut -d' ' -f1), $lifecycle: what the model saw"
  grep model_saw "$out/model-$lifecycle.jsonl" | sed 's/.*"tool"/  "tool"/'
done
echo "== the app's questions were answered:"
grep '/input"' "$out/app.log" | sed 's/.*"reply"/  /'
echo "(records in $out)"
