"""The server-sent events parser: bytes in, `(id, event, data)` frames out.

The broker's stream is small and regular (`id:`, `event:`, one `data:` line, comments for
keep-alive), so a hand-written parser of the SSE line format is shorter than a dependency. A
frame ends at a blank line; lines may end in `\\n` or `\\r\\n`. A frame larger than `MAX_FRAME`
is an error, so a broken peer cannot grow the buffer without bound.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Call arguments are at most 1 MiB of compact JSON; escaping at most doubles it.
MAX_FRAME = 8 * 1024 * 1024


@dataclass
class Frame:
    id: int | None = None
    event: str = "message"
    data: list[bytes] = field(default_factory=list)

    @property
    def payload(self) -> bytes:
        return b"\n".join(self.data)


class FrameTooLarge(Exception):
    pass


class Parser:
    def __init__(self) -> None:
        self._buf = b""
        self._frame = Frame()

    def push(self, data: bytes) -> list[Frame]:
        """Adds received bytes; returns the frames they complete."""
        buf = self._buf + data if self._buf else data
        frames: list[Frame] = []
        start = 0
        while True:
            end = buf.find(b"\n", start)
            if end < 0:
                break
            line = buf[start:end]
            start = end + 1
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if self._frame.data:
                    frames.append(self._frame)
                self._frame = Frame()
                continue
            if line.startswith(b":"):
                continue
            name, _, value = line.partition(b":")
            if value.startswith(b" "):
                value = value[1:]
            if name == b"data":
                self._frame.data.append(value)
            elif name == b"event":
                self._frame.event = value.decode("utf-8", "replace")
            elif name == b"id":
                self._frame.id = int(value) if value.isdigit() else None
        self._buf = buf[start:]
        if len(self._buf) + sum(len(d) for d in self._frame.data) > MAX_FRAME:
            raise FrameTooLarge()
        return frames
