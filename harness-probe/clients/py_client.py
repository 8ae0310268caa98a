"""Reference client on the official Python SDK (`mcp` on PyPI, 2.x), for harness-probe.

    python py_client.py default|relist|ignore|relist-modern

Launches `$HARNESS_PROBE_BIN serve` (harness-probe run sets it), lists tools, calls the image and
error tools, then waits for notifications/tools/list_changed:
  default        legacy handshake, no message handler: what the SDK does by itself.
  relist         legacy handshake; the script's message_handler lists tools again.
  ignore         legacy handshake; the script's message_handler drops the notification.
  relist-modern  the SDK's default `mode="auto"` (2026-07-28 when the server has it); the script
                 opens `client.listen(tools_list_changed=True)` and lists tools on each event.
What the SDK delivered is appended to $HARNESS_PROBE_OUT as `source: client` records.
"""

import json
import os
import sys
import time
from importlib.metadata import version

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters

MODES = ("default", "relist", "ignore", "relist-modern")
MODE = sys.argv[1] if len(sys.argv) > 1 else "default"
if MODE not in MODES:
    sys.exit(f"unknown mode {MODE}")
NAME = f"harness-probe-py-sdk-{MODE}"
OUT = os.environ.get("HARNESS_PROBE_OUT")
BIN = os.environ.get("HARNESS_PROBE_BIN", "harness-probe")
GRACE_S = int(os.environ.get("HARNESS_PROBE_GRACE_MS", "5000")) / 1000


def side(event, **fields):
    if not OUT:
        return
    line = {"source": "client", "unix_ms": int(time.time() * 1000), "event": event, "client_name": NAME, **fields}
    with open(OUT, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


async def main():
    changed = anyio.Event()

    async def on_message(message):
        if isinstance(message, types.ToolListChangedNotification):
            if MODE == "ignore":
                side("client_note", text="the script received notifications/tools/list_changed and ignored it")
            else:
                side("client_note", text="the SDK passed notifications/tools/list_changed to message_handler")
            changed.set()

    server = StdioServerParameters(command=BIN, args=["serve"], env=dict(os.environ))
    kwargs = {
        "client_info": types.Implementation(name=NAME, version=version("mcp")),
        "mode": "auto" if MODE == "relist-modern" else "legacy",
    }
    if MODE in ("relist", "ignore"):
        kwargs["message_handler"] = on_message
    async with Client(server, **kwargs) as client:
        if MODE == "relist-modern":
            async with client.listen(tools_list_changed=True) as sub:
                await client.list_tools()
                await call_special_tools(client)
                with anyio.move_on_after(20):
                    async for _event in sub:
                        side("client_note", text="the SDK yielded a tools-changed event on the listen stream")
                        await relist_and_call(client)
                        break
            return
        await client.list_tools()
        await call_special_tools(client)
        if MODE == "relist":
            with anyio.move_on_after(20):
                await changed.wait()
            if changed.is_set():
                await relist_and_call(client)
        else:
            if MODE == "default":
                side("client_note", text="no message handler: whatever the SDK does by itself")
            with anyio.move_on_after(3):
                await changed.wait()
            await anyio.sleep(GRACE_S + 2)


async def call_special_tools(client):
    for tool in ("probe_image", "probe_error"):
        try:
            result = await client.call_tool(tool, {})
            side(
                "client_saw",
                tool=tool,
                content_types=[c.type for c in result.content],
                is_error=bool(result.is_error),
                note="the SDK returns the CallToolResult to the application as sent",
            )
        except Exception as e:  # noqa: BLE001 - recorded, not handled
            side("client_saw", tool=tool, error=repr(e), note="the SDK raised instead of returning a result")


async def relist_and_call(client):
    # Bypass the response cache: the point is a fresh tools/list on the wire.
    tools = await client.list_tools(cache_mode="refresh")
    side("client_note", text="the script listed tools again on the notification")
    if any(t.name == "probe_new_tool" for t in tools.tools):
        await client.call_tool("probe_new_tool", {})


anyio.run(main)
