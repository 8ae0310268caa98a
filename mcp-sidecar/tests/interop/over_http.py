"""A 2025-11-25 session over the broker's `/mcp` on the official Python MCP SDK client.

    python over_http.py [killed|modern]

Run by the Rust test `http::python_sdk_over_http`, which plays the app. The client speaks MCP
over Streamable HTTP to LEO_MCP_URL with `Authorization: Bearer $LEO_AGENT_TOKEN` (and
`Leo-Agent: $LEO_AGENT` when set), in the initialize era (mode="legacy": Mcp-Session-Id, the
GET stream for notifications). Prints {"step": ...} lines; reads a line on stdin where the test
must act first (a tool added). With `killed`, it starts a long call after connecting and waits
to be killed in the middle of it. With `modern`, the client speaks 2026-07-28 (mode="auto":
server/discover, no session, client info in each request's _meta): it lists, calls, and
waits for a tool-list change on a subscriptions/listen stream.
"""

import json
import os
import sys

import anyio
import mcp_types as types
from listen import names, until_listed
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def say(step, **data):
    print(json.dumps({"step": step, **data}), flush=True)


def dump(result):
    return result.model_dump(by_alias=True, exclude_none=True)


async def wait_for_line():
    await anyio.to_thread.run_sync(sys.stdin.readline)


async def modern(client):
    say("connected", protocol=client.protocol_version)
    say("listed", tools=names(await client.list_tools()))
    say("called", result=dump(await client.call_tool("echo", {"text": "hi"})))
    await until_listed(client, "ready_for_change")


async def main():
    headers = {"Authorization": f"Bearer {os.environ['LEO_AGENT_TOKEN']}"}
    if os.environ.get("LEO_AGENT"):
        headers["Leo-Agent"] = os.environ["LEO_AGENT"]
    changed = anyio.Event()

    async def on_message(message):
        inner = getattr(message, "root", message)
        if getattr(inner, "method", None) == "notifications/tools/list_changed":
            changed.set()

    async def on_elicit(context, params):
        say("asked", message=params.message)
        return types.ElicitResult(action="accept", content={"confirm": True})

    http = create_mcp_http_client(headers=headers)
    transport = streamable_http_client(os.environ["LEO_MCP_URL"], http_client=http)
    info = types.Implementation(name="claude-code", version="0-python-http")
    if sys.argv[1:] == ["modern"]:
        async with http, Client(transport, mode="auto", client_info=info) as client:
            await modern(client)
        say("done")
        return
    async with http, Client(
        transport,
        mode="legacy",
        client_info=info,
        elicitation_callback=on_elicit,
        message_handler=on_message,
    ) as client:
        say("connected", protocol=client.protocol_version)
        if sys.argv[1:] == ["killed"]:
            say("in_flight")
            await client.call_tool("slow", {})
        say("listed", tools=names(await client.list_tools()))
        say("called", result=dump(await client.call_tool("echo", {"text": "hi"})))

        reports = []

        async def on_progress(progress, total, message):
            reports.append(progress)

        slow = await client.call_tool("slow", {}, progress_callback=on_progress)
        say("slow", result=dump(slow), progress=len(reports))
        say("confirmed", result=dump(await client.call_tool("confirm", {})))

        say("ready_for_change")
        await wait_for_line()
        with anyio.fail_after(20):
            await changed.wait()
        say("changed", tools=names(await client.list_tools()))

        # A call the client gives up on: the SDK sends notifications/cancelled.
        with anyio.move_on_after(float(os.environ.get("LEO_CANCEL_AFTER_S", "1"))):
            await client.call_tool("slow", {})
        say("gave_up")
    # Leaving the client ends the session with a DELETE.
    say("done")


anyio.run(main)
