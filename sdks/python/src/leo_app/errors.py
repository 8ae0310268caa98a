"""The app's errors: what the broker refused, what cannot be retried, and a tool's own failure."""

from __future__ import annotations


class LeoError(Exception):
    """Any error of this package."""


class ConnectError(LeoError):
    """The broker could not be reached, or the connection broke. Retried."""


class ProtocolError(LeoError):
    """The broker answered something this package cannot read. Retried."""


class Refused(LeoError):
    """The broker refused a request with a documented error code."""

    def __init__(self, code: str, message: str, status: int = 0):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status


class InputUnsupported(Refused):
    """`call.ask` cannot reach the user: the agent's harness did not declare MCP elicitation
    (the broker answers `409 input_unsupported` at once). Fall back to asking in the app's own
    window, or go on with a default."""


class DigestMismatch(Refused):
    """`409 digest_mismatch`: the decision named a digest that is not the call's (the call was
    shown from an older list, or someone changed it). List the approvals again."""


class AlreadyDecided(Refused):
    """`409 already_decided`: another approver decided the call first, or it ended (expired,
    cancelled, its agent gone). Nothing to do."""


def typed_refusal(r: Refused) -> Refused:
    """The refusal of a decision as its own class when it has one."""
    kind = {"digest_mismatch": DigestMismatch, "already_decided": AlreadyDecided}.get(r.code)
    return kind(r.code, r.message, r.status) if kind else r


class FatalError(LeoError):
    """An error retrying cannot fix: a wrong setting, a refused token, a refused group. Ends
    `App.serve`."""


class ToolError(Exception):
    """Raise it from a handler to answer the call with the app's own error; the agent sees
    `"<code>: <message>"`. `code` is 1 to 64 of `[A-Za-z0-9_.-]`."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class Cancelled(Exception):
    """Raised by `Call.check()` and `Call.sleep()` once the call is cancelled."""
