#!/bin/sh
# Measures what the harness CLIs do with Leo's MCP features, with no account: a real broker and
# leo-mcp on a throw-away LEO_HOME, features_app.py as the app, and each CLI in its
# non-interactive mode against a scripted model server (../fake-anthropic.mjs for `claude -p`,
# ../fake-openai.mjs for `codex exec` and `opencode run`), once on the initialize lifecycle and
# once with `leo-mcp --discover`. Each harness gets a tool timeout of TOOL_TIMEOUT_S (4 s):
# `MCP_TOOL_TIMEOUT` for Claude Code, `tool_timeout_sec` for codex, `timeout` for opencode; the
# app's slow and quiet tools take FEATURES_SLOW_S (8 s), one with progress every second and one
# without, so the pair shows whether progress resets that timeout. A third run per harness
# (interrupt) calls only quiet, with a 30 s tool timeout, and sends the CLI SIGINT a second after
# the call reached the app, to see whether the app hears of it (notifications/cancelled) before
# the call ends by itself. No run takes a minute.
#
#   harness-probe/clients/features/measure.sh [OUTDIR]
#   HARNESSES="codex" LIFECYCLES="initialize" harness-probe/clients/features/measure.sh OUTDIR
#
# Needs: leo and leo-mcp built (target/debug), node, python3, and the CLIs on PATH (for example
# testdata/harness-clis/node_modules/.bin). Writes per run, in OUTDIR/HARNESS-LIFECYCLE/:
# model.jsonl (what the model saw), in.jsonl (what the harness sent leo-mcp), out.jsonl (what
# leo-mcp sent the harness), cli.out; app.log (what the app got back) for all runs; then
# summarise.py prints the matrix and writes OUTDIR/features.json.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
clients=$(cd "$here/.." && pwd)
root=$(cd "$here/../../.." && pwd)
out=${1:-$(mktemp -d)}
mkdir -p "$out"
out=$(cd "$out" && pwd)
port=${LEO_PORT:-8371}
timeout_s=${TOOL_TIMEOUT_S:-4}
export LEO_HOME="$out/leo" LEO_PORT="$port" FEATURES_LOG="$out/app.log" FEATURES_SLOW_S="${FEATURES_SLOW_S:-8}"
export HARNESS_PROBE_TOOLS=record,deploy,confirm,image,slow,quiet HARNESS_PROBE_WATCH=none
export HARNESS_PROBE_TEXT_MAX=400 HARNESS_PROBE_GRACE_MS=0
"$root/target/debug/leo" broker --port "$port" >"$out/broker.log" 2>&1 &
broker=$!
app=
trap 'kill $broker $app 2>/dev/null || true' EXIT
sleep 1
python3 "$here/features_app.py" >"$out/app.out" 2>&1 &
app=$!
sleep 1

# wrap DIR AGENT: a leo-mcp command that records both directions; it sets LEO_HOME itself,
# since codex passes MCP servers only a few environment variables.
wrap() {
  cat >"$1/wrap.sh" <<WRAP
#!/bin/sh
export LEO_HOME="$LEO_HOME" LEO_PORT="$LEO_PORT"
tee -a "$1/in.jsonl" | "$root/target/debug/leo-mcp" --agent $2 "\$@" 2>>"$1/leo-mcp.log" | tee -a "$1/out.jsonl"
WRAP
  chmod +x "$1/wrap.sh"
}

run_claude() { # DIR ARGS_JSON
  printf '{"mcpServers": {"leo": {"type": "stdio", "command": "%s", "args": %s}}}\n' "$1/wrap.sh" "$2" >"$1/mcp.json"
  HOME="$1/home" HARNESS_PROBE_OUT="$1/model.jsonl" MCP_TOOL_TIMEOUT=$((timeout_s * 1000)) \
    ENABLE_TOOL_SEARCH=false CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_TELEMETRY=1 \
    node "$clients/fake-anthropic.mjs" -- claude -p "Call the leo tools." \
    --mcp-config "$1/mcp.json" --strict-mcp-config --allowedTools mcp__leo &
  echo $! >"$1/fake.pid"
  wait $!
}

run_codex() { # DIR ARGS_TOML
  mkdir -p "$1/codex-home"
  printf '[mcp_servers.leo]\ncommand = "%s"\nargs = %s\nstartup_timeout_sec = 30\ntool_timeout_sec = %s\n' \
    "$1/wrap.sh" "$2" "$timeout_s" >"$1/codex-home/config.toml"
  CODEX_HOME="$1/codex-home" HARNESS_PROBE_OUT="$1/model.jsonl" \
    node "$clients/fake-openai.mjs" -- codex exec --skip-git-repo-check -C "$1" \
    -c model_provider=fake -c 'model_providers.fake={name="fake",base_url="{model_url}",wire_api="responses",env_key="OPENAI_API_KEY"}' \
    -m fake-model -c approval_policy=never --dangerously-bypass-approvals-and-sandbox "Call the leo tools." &
  echo $! >"$1/fake.pid"
  wait $!
}

run_opencode() { # DIR ARGS_JSON
  h="$1/home"
  printf '{"mcp": {"leo": {"type": "local", "command": ["%s"], "timeout": %s, "enabled": true}}}\n' "$1/wrap.sh" "$((timeout_s * 1000))" >"$1/opencode-in.json"
  [ "$2" = '[]' ] || sed -i "s|\"command\": \[\"\([^\"]*\)\"\]|\"command\": [\"\1\", \"--discover\"]|" "$1/opencode-in.json"
  mkdir -p "$h/proj"
  HOME="$h" XDG_CONFIG_HOME="$h/.config" XDG_DATA_HOME="$h/.local/share" XDG_CACHE_HOME="$h/.cache" \
    XDG_STATE_HOME="$h/.local/state" OPENCODE_DISABLE_AUTOUPDATE=1 OPENCODE_DISABLE_MODELS_FETCH=1 \
    OPENCODE_DISABLE_DEFAULT_PLUGINS=1 HARNESS_PROBE_OUT="$1/model.jsonl" \
    node "$clients/fake-openai.mjs" -- sh -c "node '$clients/opencode-fake-config.mjs' '$1/opencode-in.json' '$1/opencode.json' && cd '$h/proj' && OPENCODE_CONFIG='$1/opencode.json' exec opencode run 'Call the leo tools.'" &
  echo $! >"$1/fake.pid"
  wait $!
}

# interrupt DIR AGENT: once the app has the agent's quiet call, SIGINT to the scripted model
# server, which passes it to the CLI (as Ctrl-C in its terminal would; Esc in an interactive
# session is not this).
interrupt() {
  i=0
  until grep '"client_tool.request"' "$out/app.log" 2>/dev/null | grep -q "\"$2\""; do
    i=$((i + 1))
    [ $i -lt 300 ] || return 0
    sleep 0.2
  done
  sleep 1
  kill -INT "$(cat "$1/fake.pid")" 2>/dev/null || true
}

for harness in ${HARNESSES:-claude codex opencode}; do
  for lifecycle in ${LIFECYCLES:-initialize discover interrupt}; do
    d="$out/$harness-$lifecycle"
    mkdir -p "$d/home"
    # codex is not known to re-list tools, so auto mode would give it the fallback tools;
    # native mode shows it the app's tools (they are registered before it starts).
    mode=
    [ "$harness" = codex ] && mode=" --mode native"
    wrap "$d" "$harness-$lifecycle$mode"
    args='[]'
    [ "$lifecycle" = discover ] && args='["--discover"]'
    if [ "$lifecycle" = interrupt ]; then
      (timeout_s=30 HARNESS_PROBE_TOOLS=quiet "run_$harness" "$d" "$args" >"$d/cli.out" 2>&1) &
      interrupt "$d" "$harness-$lifecycle"
      wait $! || echo "measure: $harness ($lifecycle) exited $?" >&2
    else
      "run_$harness" "$d" "$args" >"$d/cli.out" 2>&1 || echo "measure: $harness ($lifecycle) exited $?" >&2
    fi
    echo "measure: $harness $lifecycle done" >&2
  done
done
sleep 1
python3 "$here/summarise.py" "$out"
