"""Prompts, resources, templates and completions through leo-mcp on the official Python MCP SDK.

    python offers.py stdio|http legacy|modern

Run by the Rust test `offers::python_sdk_*`, which plays the app. `stdio` launches leo-mcp
(LEO_MCP_BIN, LEO_HOME); `http` speaks to LEO_MCP_URL with `Authorization: Bearer
$LEO_AGENT_TOKEN`. `legacy` is the initialize era (mode="legacy"), where the script
subscribes to a resource with resources/subscribe; `modern` is 2026-07-28 (mode="auto", leo-mcp
with --discover on stdio), where it opens a subscriptions/listen stream for it. Either way it
then waits for the resource's update, which the test has the app announce. Last it declares
sampling, chooses the log level `warning` (logging/setLevel in the initialize era, the request's
`_meta` opt-in in 2026-07-28) and calls `summarize`, during which the app logs and samples.
Prints {"step": ...} lines.
"""

import json
import os
import sys
import warnings

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

TRANSPORT, ERA = sys.argv[1], sys.argv[2]


def say(step, **data):
    print(json.dumps({"step": step, **data}), flush=True)


def dump(result):
    return result.model_dump(by_alias=True, exclude_none=True, mode="json")


async def reads(client):
    say("prompts", result=dump(await client.list_prompts()))
    say("prompt", result=dump(await client.get_prompt("greet", {"name": "Ada"})))
    say("resources", result=dump(await client.list_resources()))
    say("templates", result=dump(await client.list_resource_templates()))
    say("read_text", result=dump(await client.read_resource("test://notes")))
    say("read_blob", result=dump(await client.read_resource("test://pixel.png")))
    say("read_template", result=dump(await client.read_resource("test://items/42")))
    ref = types.PromptReference(type="ref/prompt", name="greet")
    say("complete", result=dump(await client.complete(ref, {"name": "name", "value": "A"})))


# What the harness's model was asked, and the log messages the client heard.
sampled, logged = [], []


async def sample(_context, params):
    """The harness's model: a fixed completion; what it was asked is reported by `summarized`."""
    sampled.append(dump(params))
    text = types.TextContent(type="text", text="a short summary")
    return types.CreateMessageResult(role="assistant", content=text, model="py-model")


async def record_log(params):
    logged.append(dump(params))


async def summarize(client):
    if ERA == "legacy":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            await client.set_logging_level("warning")
    result = await client.call_tool("summarize", {"text": "a long text"})
    say("summarized", result=dump(result), sampled=sampled, logged=logged)


async def main():
    updated = anyio.Event()
    uris = []

    async def on_message(message):
        inner = getattr(message, "root", message)
        if getattr(inner, "method", None) == "notifications/resources/updated":
            uris.append(inner.params.uri)
            updated.set()

    info = types.Implementation(name="claude-code", version="0-python-offers")
    mode = "legacy" if ERA == "legacy" else "auto"
    if TRANSPORT == "stdio":
        args = ["--agent", "py-offers", "--mode", "native"]
        args.append("--no-discover" if ERA == "legacy" else "--discover")
        transport = StdioServerParameters(
            command=os.environ["LEO_MCP_BIN"], args=args, env=dict(os.environ)
        )
        http = None
    else:
        headers = {"Authorization": f"Bearer {os.environ['LEO_AGENT_TOKEN']}"}
        http = create_mcp_http_client(headers=headers)
        transport = streamable_http_client(os.environ["LEO_MCP_URL"], http_client=http)
    # 2026-07-28 has no session level: `log_level` stamps the opt-in on every request.
    log_level = None if ERA == "legacy" else "warning"
    async with Client(
        transport,
        mode=mode,
        client_info=info,
        message_handler=on_message,
        sampling_callback=sample,
        logging_callback=record_log,
        log_level=log_level,
    ) as client:
        say("connected", protocol=client.protocol_version)
        await reads(client)
        if ERA == "legacy":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                await client.subscribe_resource("test://notes")
            say("subscribed")
            with anyio.fail_after(20):
                await updated.wait()
            say("updated", uris=uris)
        else:
            async with client.listen(
                prompts_list_changed=True, resource_subscriptions=["test://notes"]
            ) as sub:
                say("subscribed", honored=dump(sub.honored))
                with anyio.fail_after(20):
                    async for event in sub:
                        if type(event).__name__ == "ResourceUpdated":
                            say("updated", uris=[event.uri])
                            break
        await summarize(client)
    if http is not None:
        await http.aclose()
    say("done")


anyio.run(main)
