"""A timeout that never loses a cancellation.

On Python 3.11 and before, `asyncio.wait_for` swallows a cancellation that arrives in the same
loop step as the awaited result: it returns the result and the task goes on as if nobody had
asked it to stop. The app reads its event stream through a timeout, so a SIGTERM that landed as
a read completed (a broker stopped at the same moment sends its last bytes then) was lost, and
the app went on retrying for ever. `within` is the one timeout of this package: on 3.11 and
later `asyncio.timeout` (which counts cancellations), before that a task awaited with
`asyncio.wait`, which lets a cancellation through.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def within(aw: Awaitable[T], timeout: float) -> T:
    """Awaits `aw` for at most `timeout` seconds (else `asyncio.TimeoutError`, `aw` cancelled);
    a cancellation of the caller always propagates."""
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(timeout):
            return await aw
    task = asyncio.ensure_future(aw)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except BaseException:
        task.cancel()
        raise
    if not done:
        task.cancel()
        raise asyncio.TimeoutError()
    return task.result()
