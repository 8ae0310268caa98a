"""A 2026-07-28 session on the official Python MCP SDK client (`mcp` on PyPI).

    python modern.py

Run by the Rust test `features::python_sdk_2026_session`, which plays the app. The SDK's
default mode (`auto`) sends server/discover; leo-mcp runs with --discover, so the session is
stateless: no initialize, client info in each request's _meta, tool-list changes on a
subscriptions/listen stream, and an app's question travels as an input_required result that
the SDK answers through its elicitation callback and retries. Prints {"step": ...} lines; waits for a line on stdin before it
expects the change. Env: LEO_MCP_BIN, LEO_HOME.
"""

import json
import os

import anyio
import mcp_types as types
from listen import names, until_listed
from mcp import Client
from mcp.client.stdio import StdioServerParameters


def say(step, **data):
    print(json.dumps({"step": step, **data}), flush=True)


async def on_elicit(context, params):
    say("asked", message=params.message)
    return types.ElicitResult(action="accept", content={"confirm": True})


async def main():
    server = StdioServerParameters(
        command=os.environ["LEO_MCP_BIN"],
        args=["--agent", "py-modern", "--discover"],
        env=dict(os.environ),
    )
    # A name the capability table maps to native: the mode comes from each request's _meta.
    info = types.Implementation(name="claude-code", version="0-python-sdk")
    async with Client(server, client_info=info, elicitation_callback=on_elicit) as client:
        say("connected", protocol=client.protocol_version)
        say("listed", tools=names(await client.list_tools()))
        called = await client.call_tool("echo", {"text": "hi"})
        say("called", result=called.model_dump(by_alias=True, exclude_none=True))
        # The app asks during this call: an input_required round, answered by on_elicit.
        confirmed = await client.call_tool("confirm", {})
        say("confirmed", result=confirmed.model_dump(by_alias=True, exclude_none=True))
        await until_listed(client, "listening")
    say("done")


anyio.run(main)
