"""Offer tools to AI coding agents from a Python app, through the local Leo broker.

An app registers tools and answers their calls; agents (Claude Code, opencode, codex… each
through its `leo-mcp`) see them as their own tools::

    from leo_app import App, Call

    app = App("greeter")

    @app.tool(answers_at_once=True)
    def greet(name: str) -> str:
        "Greet someone by name"
        return f"Hello, {name}!"

    @app.tool(timeout_s=60)
    async def countdown(call: Call, seconds: int = 3) -> str:
        "Count down, then say done"
        await call.sleep(seconds)   # raises Cancelled if the agent gives up
        return "done"

    app.run()   # $LEO_HOME/run/leo.sock with the operator token; Ctrl-C stops

The standard library is all it needs; pydantic models are accepted as parameter types when
pydantic is installed.
"""

from . import reply as content
from ._where import default_home
from .app import App
from .approver import ApprovalRequest, Approver
from .call import Answer, Call
from .errors import (
    AlreadyDecided,
    Cancelled,
    ConnectError,
    DigestMismatch,
    FatalError,
    InputUnsupported,
    LeoError,
    ProtocolError,
    Refused,
    ToolError,
)
from .offers import Read, ReadError
from .reply import Reply
from .schema import schema_of
from .tool import Tool

__all__ = [
    "AlreadyDecided", "Answer", "App", "ApprovalRequest", "Approver", "Call", "Cancelled",
    "ConnectError", "DigestMismatch", "FatalError", "InputUnsupported",
    "LeoError", "ProtocolError", "Read", "ReadError", "Refused", "Reply", "Tool", "ToolError",
    "content",
    "default_home", "schema_of",
]
__version__ = "0.1.0"
