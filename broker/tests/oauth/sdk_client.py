"""The official Python MCP SDK's OAuth client (`mcp.client.auth`) against the broker's `/mcp`.

    python sdk_client.py

Run by the Rust tests `oauth::the_python_sdk_logs_in_through_the_console_and_calls_a_tool`
and `oauth::cimd::the_python_sdk_logs_in_by_its_metadata_document`.
The client starts without a token: the broker answers 401 with its metadata, the SDK
discovers the authorization server, registers (Dynamic Client Registration), or, when
LEO_CIMD_URL is set, names that URL as its client_id (a Client ID Metadata Document the test
serves), and prints the
authorization URL ({"step": "authorize", "url": ...}) instead of opening a browser. The test
approves in the console as the operator would and writes the redirect URL it got back on
stdin; the SDK exchanges the code and retries. Then it lists the tools and calls `echo`.
"""

import json
import os
import sys
from urllib.parse import parse_qs, urlparse

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.auth import OAuthClientMetadata


def say(step, **data):
    print(json.dumps({"step": step, **data}), flush=True)


class Memory:
    def __init__(self):
        self.tokens = None
        self.client = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client

    async def set_client_info(self, client_info):
        self.client = client_info


async def redirect(url):
    say("authorize", url=url)


async def callback():
    line = await anyio.to_thread.run_sync(sys.stdin.readline)
    query = parse_qs(urlparse(line.strip()).query)
    first = lambda k: query.get(k, [None])[0]
    return AuthorizationCodeResult(code=first("code"), state=first("state"), iss=first("iss"))


async def main():
    url = os.environ["LEO_MCP_URL"]
    metadata = OAuthClientMetadata(
        client_name="SDK Client",
        redirect_uris=["http://127.0.0.1:33418/callback"],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
    )
    storage = Memory()
    auth = OAuthClientProvider(
        url,
        metadata,
        storage,
        redirect,
        callback,
        client_metadata_url=os.environ.get("LEO_CIMD_URL"),
    )
    http = create_mcp_http_client(auth=auth)
    transport = streamable_http_client(url, http_client=http)
    # Named as a harness that shows app tools natively (the broker's harness table).
    info = types.Implementation(name="claude-code", version="0-python-oauth")
    async with http, Client(transport, mode="legacy", client_info=info) as client:
        say("connected", token=storage.tokens.access_token, client_id=storage.client.client_id)
        listed = await client.list_tools()
        say("listed", tools=sorted(t.name for t in listed.tools))
        result = await client.call_tool("echo", {"text": "hi"})
        say("called", result=result.model_dump(by_alias=True, exclude_none=True))
    say("done")


anyio.run(main)
