"""Reads the records measure.sh wrote and prints, per run, what the harness did with each
feature (OUTDIR/runs.json), then one row per harness with both lifecycles merged
(OUTDIR/features.json), in the format of testdata/probe/features.json, which
`harness-probe table` merges into testdata/harnesscaps.json. Standard library only.

    python3 summarise.py OUTDIR
"""
import datetime, json, os, sys

# How each harness was driven, and the setting that bounds its tool calls.
HOW = {
    "claude": ("claude -p --mcp-config --strict-mcp-config --allowedTools mcp__leo against fake-anthropic.mjs, ENABLE_TOOL_SEARCH=false, MCP_TOOL_TIMEOUT={ms}", "MCP_TOOL_TIMEOUT (environment, ms)"),
    "codex": ("codex exec --dangerously-bypass-approvals-and-sandbox against fake-openai.mjs (Responses API), CODEX_HOME config.toml [mcp_servers.leo] with leo-mcp --mode native, tool_timeout_sec = {s}", "tool_timeout_sec (config.toml, per server, s)"),
    "opencode": ("opencode run against fake-openai.mjs (an OpenAI-compatible provider), OPENCODE_CONFIG mcp.leo local with timeout {ms}", "timeout (opencode.json mcp entry, ms)"),
}


def lines(path):
    if not os.path.exists(path):
        return []
    out = []
    for raw in open(path):
        try:
            out.append(json.loads(raw))
        except ValueError:
            pass
    return out


def text(blocks):
    return " ".join(b.get("text", "") for b in blocks if "text" in b)


def timed_out(blocks):
    t = text(blocks).lower()
    return "timed out" in t or "timeout" in t


def run(d, name, app, events):
    sent = lines(os.path.join(d, "in.jsonl"))
    saw = {r["tool"]: r["blocks"] for r in lines(os.path.join(d, "model.jsonl")) if r.get("event") == "model_saw"}
    init = next((m for m in sent if m.get("method") == "initialize"), None)
    discover = [m for m in sent if m.get("method") == "server/discover"]
    calls = {m["id"]: m for m in sent if m.get("method") == "tools/call"}
    names = {i: m["params"].get("name") for i, m in calls.items()}
    modern = [m for m in calls.values() if "io.modelcontextprotocol/protocolVersion" in (m["params"].get("_meta") or {})]
    meta = (modern[0]["params"]["_meta"] if modern else (discover[0]["params"].get("_meta") if discover else {})) or {}
    if modern:
        version = meta.get("io.modelcontextprotocol/protocolVersion")
        caps = meta.get("io.modelcontextprotocol/clientCapabilities") or {}
        client = meta.get("io.modelcontextprotocol/clientInfo") or {}
    else:
        version = init["params"].get("protocolVersion") if init else None
        caps = init["params"].get("capabilities", {}) if init else {}
        client = init["params"].get("clientInfo", {}) if init else {}
    ext = caps.get("extensions") or {}
    cancelled = {m["params"].get("requestId") for m in sent if m.get("method") == "notifications/cancelled"}
    record = text(saw.get("record", []))
    structured = '"build":7' in record.replace(" ", "")
    content = "summary block" in record
    answer = next((a for a in app if a.get("agent") == name), {}).get("reply")
    slow, quiet = saw.get("slow"), saw.get("quiet")
    image = saw.get("image")
    return {
        "run": os.path.basename(d),
        "client": client.get("name"),
        "version": client.get("version"),
        "tried_discover": bool(discover),
        "protocol_version": version,
        "elicitation_declared": sorted((caps.get("elicitation") or {}).keys()) if "elicitation" in caps else None,
        "tasks_declared": "io.modelcontextprotocol/tasks" in ext or "tasks" in caps,
        "tasks_used": any(m.get("method", "").startswith("tasks/") for m in sent),
        "subscriptions_listen": any(m.get("method") == "subscriptions/listen" for m in sent),
        "progress_token": bool(calls) and all("progressToken" in (m["params"].get("_meta") or {}) for m in calls.values()),
        "structured_result": "both" if structured and content else "structured_only" if structured else "content_only" if content else None,
        "elicitation_answer": (answer or {}).get("data", {}).get("action") or (answer or {}).get("code"),
        "image_kept": None if image is None else any(b.get("type") in ("image", "input_image") for b in image),
        "tool_timeout_s": int(os.environ.get("TOOL_TIMEOUT_S", "4")),  # 30 in interrupt runs
        "progress_resets_timeout": None if slow is None else not timed_out(slow),
        "times_out_without_progress": None if quiet is None else timed_out(quiet),
        "cancels_on_own_timeout": any(names.get(i) in ("slow", "quiet") for i in cancelled),
        "quiet_completed": quiet is not None and "quiet: done" in text(quiet),
        "cancelled_tools": sorted({names.get(i) for i in cancelled if names.get(i)}),
        "app_saw_cancelled": sorted({e["data"].get("reason") for e in events if e["data"].get("agent") == name}),
    }


def main():
    out = sys.argv[1]
    app = []
    for r in lines(os.path.join(out, "app.log")):
        if r.get("path", "").endswith("/input"):
            app.append(r)
    # Which agent asked: the input POST's request id, matched to the request event.
    agents = {}
    for r in lines(os.path.join(out, "app.log")):
        if r.get("event") == "client_tool.request":
            agents[r["data"]["id"]] = r["data"].get("agent")
    for a in app:
        a["agent"] = agents.get(a["path"].split("/")[-2])
    cancels = [r for r in lines(os.path.join(out, "app.log")) if r.get("event") == "client_tool.cancelled"]
    runs = []
    for d in sorted(os.listdir(out)):
        p = os.path.join(out, d)
        if os.path.isdir(p) and os.path.exists(os.path.join(p, "in.jsonl")):
            runs.append(run(p, d, app, cancels))
    json.dump(runs, open(os.path.join(out, "runs.json"), "w"), indent=2)
    for r in runs:
        print(json.dumps(r))
    rows = [merge(h, [r for r in runs if r["run"].startswith(h + "-")]) for h in HOW]
    rows = [r for r in rows if r]
    json.dump({"version": 1, "features": rows}, open(os.path.join(out, "features.json"), "w"), indent=2)
    open(os.path.join(out, "features.json"), "a").write("\n")


def interrupted(intr):
    """Whether SIGINT during a call told the app; None when it did not interrupt the run."""
    if not intr or not intr["client"] or intr["quiet_completed"]:
        return None
    return "cancelled_by_agent" in intr["app_saw_cancelled"]


def merge(harness, runs):
    """One row per harness: the initialize run, with the discover run's lifecycle facts."""
    init = next((r for r in runs if r["run"].endswith("-initialize")), None)
    intr = next((r for r in runs if r["run"].endswith("-interrupt")), None)
    disc = next((r for r in runs if r["run"].endswith("-discover")), None)
    base = init or disc
    if not base or not base["client"]:
        return None
    t = base["tool_timeout_s"]
    how, setting = HOW[harness]
    notes = []
    for key in ("structured_result", "image_kept", "elicitation_answer", "progress_resets_timeout", "progress_token"):
        if init and disc and init[key] != disc[key]:
            notes.append(f"{key}: {init[key]} on initialize, {disc[key]} with --discover")
    if intr and intr["client"]:
        if intr["quiet_completed"]:
            notes.append("SIGINT did not stop the non-interactive run: the interrupted call completed; interrupts are not measured")
        else:
            notes.append("on SIGINT during a call (non-interactive mode) the app saw: " + (", ".join(intr["app_saw_cancelled"]) or "nothing"))
    if disc and not disc["client"]:
        notes.append("with --discover the session made no tool call")
    return {
        "client_name": base["client"],
        "version_seen": base["version"],
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "how": how.format(ms=t * 1000, s=t) + "; harness-probe/clients/features/measure.sh",
        "protocol_version": init and init["protocol_version"],
        "protocol_version_with_discover": disc and disc["protocol_version"],
        "tries_discover": bool(base["tried_discover"]),
        "subscriptions_listen": bool(disc and disc["subscriptions_listen"]),
        "elicitation": base["elicitation_declared"] or [],
        "elicitation_answer": base["elicitation_answer"],
        "tasks": base["tasks_declared"],
        "progress_token": base["progress_token"],
        "structured_result": base["structured_result"],
        "images": base["image_kept"],
        "tool_timeout_setting": setting,
        "progress_resets_timeout": base["progress_resets_timeout"],
        "cancels_on_timeout": base["cancels_on_own_timeout"],
        "cancels_on_interrupt": interrupted(intr),
        "notes": notes,
    }


main()
