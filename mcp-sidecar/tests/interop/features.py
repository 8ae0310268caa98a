"""Drives leo-mcp's MCP features with the official Python MCP SDK client (`mcp` on PyPI).

    python features.py ask|plain

Run by the Rust test `features::python_sdk_client`, which plays the app. The script prints
{"step": ...} lines on stdout after each step. `ask` gives the SDK an elicitation callback (so
the client declares elicitation) that accepts; `plain` gives none. Env: LEO_MCP_BIN, LEO_HOME.
The SDK's default mode (`auto`) tries server/discover first; leo-mcp runs with --no-discover
here, so it falls back to initialize (modern.py covers the 2026-07-28 session).
"""

import json
import os
import sys

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters

MODE = sys.argv[1]


def say(step, **data):
    print(json.dumps({"step": step, **data}), flush=True)


async def on_elicit(context, params):
    say("asked", message=params.message, schema=params.requested_schema)
    return types.ElicitResult(action="accept", content={"confirm": True})


async def main():
    server = StdioServerParameters(
        command=os.environ["LEO_MCP_BIN"],
        args=["--agent", f"py-{MODE}", "--mode", "native", "--no-discover"],
        env=dict(os.environ),
    )
    kwargs = {"client_info": types.Implementation(name=f"leo-features-py-{MODE}", version="0")}
    if MODE == "ask":
        kwargs["elicitation_callback"] = on_elicit
    async with Client(server, **kwargs) as client:
        listed = await client.list_tools()
        say("listed", tools=[t.model_dump(by_alias=True, exclude_none=True) for t in listed.tools])

        record = await client.call_tool("record", {})
        say("record", result=record.model_dump(by_alias=True, exclude_none=True))

        reports = []

        async def on_progress(progress, total, message):
            reports.append({"progress": progress, "total": total, "message": message})

        deploy = await client.call_tool("deploy", {}, progress_callback=on_progress)
        say("deploy", result=deploy.model_dump(by_alias=True, exclude_none=True), reports=reports)

        confirm = await client.call_tool("confirm", {})
        say("confirm", result=confirm.model_dump(by_alias=True, exclude_none=True))
    say("done")


anyio.run(main)
