"""The bench's baseline app: the same three tools as an MCP server of its own.

It is the alternative a user would reach for: the official Python SDK (`mcp`), served over
Streamable HTTP (`--transport http`, reached through `mcp-proxy`) or over stdio
(`--transport stdio`). Each tool answers at once with a payload built at start, the same bytes
the Rust app and the floor send (see `bench/src/payload.rs`):

- `echo_small`: one text block of 100 bytes;
- `echo_64k`: one text block of 65,536 bytes;
- `image_256k`: one image block, `image/png`, 262,144 bytes of data (base64 on the wire).

mcp 2.x calls the class `MCPServer`; mcp 1.x called it `FastMCP`. Both are accepted.
"""

import argparse
import base64

from importlib.metadata import version

try:  # mcp >= 2
    from mcp.server.mcpserver import MCPServer as Server
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as Server
from mcp.types import CallToolResult

TEXT_PATTERN = "abcdefghijklmnopqrstuvwxyz0123456789 "
SMALL = 100
LARGE = 64 * 1024
IMAGE = 256 * 1024


def text(size: int) -> str:
    return (TEXT_PATTERN * (size // len(TEXT_PATTERN) + 1))[:size]


def image_bytes(size: int) -> bytes:
    return bytes((i * 131 + 7) & 0xFF for i in range(size))


def result(block: dict) -> CallToolResult:
    # `model_validate` with the wire's camelCase names works on mcp 1.x and 2.x alike.
    return CallToolResult.model_validate({"content": [block]})


SMALL_RESULT = result({"type": "text", "text": text(SMALL)})
LARGE_RESULT = result({"type": "text", "text": text(LARGE)})
IMAGE_RESULT = result(
    {
        "type": "image",
        "data": base64.b64encode(image_bytes(IMAGE)).decode("ascii"),
        "mimeType": "image/png",
    }
)

mcp = Server("leo-bench-python", log_level="WARNING")


@mcp.tool(description="Answers with 100 bytes of text.")
def echo_small(text: str = "") -> CallToolResult:
    return SMALL_RESULT


@mcp.tool(description="Answers with 64 KiB of text.")
def echo_64k(text: str = "") -> CallToolResult:
    return LARGE_RESULT


@mcp.tool(description="Answers with a 256 KiB image.")
def image_256k(text: str = "") -> CallToolResult:
    return IMAGE_RESULT


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--check", action="store_true", help="print the SDK in use and exit")
    args = parser.parse_args()
    if args.check:
        print(f"mcp {version('mcp')} ({Server.__name__})")
        return
    if args.transport == "stdio":
        mcp.run()
    else:
        # The SDK's defaults (stateful sessions, SSE responses), bound to loopback.
        mcp.run(transport="streamable-http", host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
