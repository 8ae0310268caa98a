"""HTTP/1.1 to the broker over its unix socket, TCP, or TLS over TCP (`https://`), written by
hand on asyncio streams.

A quick tool costs one POST per call, so that POST is the app's whole overhead: `http.client`
builds header objects, parses with `email`, and is blocking; here a request is one `write` of
bytes prepared ahead (the Host and Authorization lines are encoded once per client) and a
response is a status line, a few header lines and a `Content-Length` body. Idle connections are
kept for reuse (keep-alive) and dropped after `IDLE_FOR`, before the server would time them
out; a request that a reused connection could not deliver is sent again on a fresh one.

The event stream gets a connection of its own (`open_stream`), read as chunked or plain bytes.

TLS trusts what every Leo client trusts: the system's roots plus a CA file (`ca_file`, else the
file `LEO_CA_FILE` names), such as the `tls/ca.pem` of `leo tls init`; the certificate is
checked, names and expiry included, and a refused one says why (`_tls_failure`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import ssl
import time
from dataclasses import dataclass
from typing import Any

from ._aio import within
from .errors import ConnectError, ProtocolError, Refused

#: Idle connections kept for reuse.
MAX_IDLE = 32
#: An idle connection older than this is closed rather than reused (seconds).
IDLE_FOR = 20.0
#: A bound on connecting and on any JSON request (seconds).
REQUEST_TIMEOUT = 30.0
#: The largest response head accepted.
MAX_HEAD = 64 * 1024


#: The variable naming a CA file (PEM) trusted besides the system's roots.
CA_FILE_ENV = "LEO_CA_FILE"


def tls_context(ca_file: str | os.PathLike[str] | None = None) -> ssl.SSLContext:
    """The TLS settings of an `https://` broker: the system's roots plus `ca_file` (else the
    file `LEO_CA_FILE` names, if set)."""
    ctx = ssl.create_default_context()
    path = ca_file if ca_file is not None else (os.environ.get(CA_FILE_ENV) or None)
    if path is not None:
        try:
            ctx.load_verify_locations(cafile=os.fspath(path))
        except (OSError, ssl.SSLError) as e:
            raise ValueError(f"cannot read the CA file {os.fspath(path)}: {e}") from None
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def _tls_failure(host: str, e: ssl.SSLError) -> str:
    """A refused handshake, said so that its reader knows what to fix."""
    if isinstance(e, ssl.SSLCertVerificationError):
        code = e.verify_code
        if code == 10:  # X509_V_ERR_CERT_HAS_EXPIRED
            why = "its certificate has expired; renew it (`leo tls init` on the broker's host)"
        elif code == 62:  # X509_V_ERR_HOSTNAME_MISMATCH
            why = f"its certificate is not valid for {host!r} (`leo tls init --host {host}`)"
        elif code in (18, 19, 20, 21):  # self-signed, unknown issuer
            why = (
                f"its certificate is not signed by a CA this client trusts; set {CA_FILE_ENV} "
                "to the broker's CA file (tls/ca.pem in the broker's LEO_HOME after "
                "`leo tls init`)"
            )
        else:
            why = f"its certificate is refused ({e.verify_message})"
    elif "WRONG_VERSION_NUMBER" in str(e) or "record layer failure" in str(e):
        why = "it does not speak TLS (is it a plain http:// listener?)"
    else:
        why = str(e)
    return f"TLS with the broker at {host} failed: {why}"


@dataclass(frozen=True)
class Endpoint:
    """Where the broker listens: a unix socket path, or `host:port` over TCP (`tls`: HTTPS)."""

    socket: str | None = None
    authority: str | None = None
    tls: bool = False

    @staticmethod
    def from_url(url: str) -> Endpoint:
        """Parses `http://host:port` or `https://host:port` (a trailing `/` is allowed; the
        port is required)."""
        scheme, sep, rest = url.partition("://")
        if not sep or scheme not in ("http", "https"):
            raise ValueError(f"invalid broker URL {url!r}: expected http:// or https://")
        authority = rest.rstrip("/")
        if not authority or any(c in authority for c in "/?#@ "):
            raise ValueError(f"invalid broker URL {url!r}: expected http://host:port")
        host, sep, port = authority.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(
                f"invalid broker URL {url!r}: a port is required, such as http://127.0.0.1:8370"
            )
        if ":" in host and not (host.startswith("[") and host.endswith("]")):
            raise ValueError(f"invalid broker URL {url!r}: expected http://host:port")
        return Endpoint(authority=authority, tls=scheme == "https")

    @property
    def host_header(self) -> str:
        return self.authority if self.authority else "localhost"

    def __str__(self) -> str:
        if self.socket:
            return f"unix:{self.socket}"
        return f"{'https' if self.tls else 'http'}://{self.authority}"


@dataclass
class Answer:
    """A whole response."""

    status: int
    body: bytes

    def data(self) -> Any:
        """`data` of a 200 `{ok: true, data}`, else raises the refusal."""
        if self.status != 200:
            raise self.refusal()
        try:
            return json.loads(self.body)["data"]
        except (ValueError, KeyError, TypeError) as e:
            raise ProtocolError(f"response: {e}") from None

    def refusal(self) -> Exception:
        """The documented error of a failed response."""
        try:
            failure = json.loads(self.body)
            return Refused(failure["code"], failure["error"], self.status)
        except (ValueError, KeyError, TypeError):
            text = self.body[:200].decode("utf-8", "replace").strip()
            if self.status == 403:
                # The Host check answers a plain-text 403 before any JSON.
                return Refused("forbidden", text, 403)
            return ProtocolError(f"HTTP {self.status}: {text}")


class _Conn:
    __slots__ = ("reader", "since", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader = reader
        self.writer = writer
        self.since = 0.0

    def close(self) -> None:
        # Closing a broken socket may fail any way; it is being dropped.
        with contextlib.suppress(Exception):
            self.writer.close()


class Client:
    """A client of one broker with one token."""

    def __init__(self, endpoint: Endpoint, token: str, tls: ssl.SSLContext | None = None):
        if any(c in token for c in "\r\n"):
            raise ValueError("the token has characters a header cannot carry")
        if endpoint.tls and tls is None:
            tls = tls_context()
        self.endpoint = endpoint
        self._tls = tls if endpoint.tls else None
        self._head_tail = (
            f"Host: {endpoint.host_header}\r\nAuthorization: Bearer {token}\r\n".encode()
        )
        self._idle: list[_Conn] = []

    async def _connect(self) -> _Conn:
        try:
            if self.endpoint.socket:
                reader, writer = await asyncio.open_unix_connection(
                    self.endpoint.socket, limit=MAX_HEAD * 4
                )
            else:
                host, _, port = self.endpoint.authority.rpartition(":")  # type: ignore[union-attr]
                host = host.strip("[]")
                reader, writer = await asyncio.open_connection(
                    host, int(port), limit=MAX_HEAD * 4, ssl=self._tls,
                    server_hostname=host if self._tls else None,
                )
                sock = writer.get_extra_info("socket")
                if sock is not None:
                    import socket

                    # Without it a body written after its head waits for a delayed ACK.
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except ssl.SSLError as e:
            host = (self.endpoint.authority or "").rpartition(":")[0]
            raise ConnectError(
                f"cannot connect to {self.endpoint}: {_tls_failure(host, e)}"
            ) from None
        except OSError as e:
            raise ConnectError(f"cannot connect to {self.endpoint}: {e}") from None
        return _Conn(reader, writer)

    def _take_idle(self) -> _Conn | None:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if now - conn.since < IDLE_FOR and not conn.reader.at_eof():
                return conn
            conn.close()
        return None

    def _put_idle(self, conn: _Conn) -> None:
        if len(self._idle) < MAX_IDLE and not conn.reader.at_eof():
            conn.since = time.monotonic()
            self._idle.append(conn)
        else:
            conn.close()

    def _head(self, method: str, path: str, length: int) -> bytes:
        if length:
            return (
                f"{method} {path} HTTP/1.1\r\n".encode()
                + self._head_tail
                + f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n".encode()
            )
        if method == "GET":
            return f"GET {path} HTTP/1.1\r\n".encode() + self._head_tail + b"\r\n"
        return f"{method} {path} HTTP/1.1\r\n".encode() + self._head_tail + b"Content-Length: 0\r\n\r\n"

    async def send(
        self, method: str, path: str, body: bytes | list[bytes] = b"",
        timeout: float | None = REQUEST_TIMEOUT,
    ) -> Answer:
        """Sends a request on a pooled connection and reads the whole answer; `timeout=None`
        waits as long as the broker takes (a question waits for the user)."""
        if timeout is None:
            return await self._send(method, path, body)
        return await within(self._send(method, path, body), timeout)

    async def _send(self, method: str, path: str, body: bytes | list[bytes]) -> Answer:
        parts = body if isinstance(body, list) else [body]
        length = sum(len(p) for p in parts)
        head = self._head(method, path, length)
        while True:
            conn = self._take_idle()
            reused = conn is not None
            if conn is None:
                conn = await self._connect()
            try:
                if len(parts) == 1 and len(parts[0]) < 16 * 1024:
                    conn.writer.write(head + parts[0])
                else:
                    conn.writer.writelines([head, *parts])
                status, headers, keep = await _read_head(conn.reader)
            except (ConnectionError, asyncio.IncompleteReadError, ProtocolError) as e:
                conn.close()
                if reused:
                    # The server closed an idle connection: the request never reached it.
                    continue
                raise ConnectError(f"{self.endpoint}: {e}") from None
            try:
                data = await _read_body(conn.reader, headers)
            except (ConnectionError, asyncio.IncompleteReadError) as e:
                conn.close()
                raise ConnectError(f"{self.endpoint}: {e}") from None
            if keep:
                self._put_idle(conn)
            else:
                conn.close()
            return Answer(status, data)

    async def get(self, path: str) -> Answer:
        return await self.send("GET", path)

    async def post(
        self, path: str, body: bytes | list[bytes], timeout: float | None = REQUEST_TIMEOUT
    ) -> Answer:
        return await self.send("POST", path, body, timeout)

    async def open_stream(self, path: str, last_event_id: int | None) -> Stream:
        """Opens the event stream on its own connection, once the broker answered 200."""

        async def open_() -> Stream:
            conn = await self._connect()
            head = f"GET {path} HTTP/1.1\r\n".encode() + self._head_tail
            head += b"Accept: text/event-stream\r\n"
            if last_event_id is not None:
                head += f"Last-Event-ID: {last_event_id}\r\n".encode()
            conn.writer.write(head + b"\r\n")
            try:
                status, headers, _ = await _read_head(conn.reader)
                if status != 200:
                    data = await _read_body(conn.reader, headers)
                    conn.close()
                    raise Answer(status, data).refusal()
            except (ConnectionError, asyncio.IncompleteReadError) as e:
                conn.close()
                raise ConnectError(f"{self.endpoint}: {e}") from None
            return Stream(conn, headers.get("transfer-encoding", "").lower() == "chunked")

        return await within(open_(), REQUEST_TIMEOUT)

    def close(self) -> None:
        for conn in self._idle:
            conn.close()
        self._idle.clear()


class Stream:
    """A streaming response body, read in pieces as they arrive."""

    def __init__(self, conn: _Conn, chunked: bool):
        self._conn = conn
        self._chunked = chunked

    async def read(self) -> bytes:
        """The next bytes of the body; `b""` at its end."""
        reader = self._conn.reader
        if not self._chunked:
            return await reader.read(64 * 1024)
        line = await reader.readline()
        if not line:
            return b""
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise ProtocolError("stream: bad chunk size") from None
        if size == 0:
            return b""
        data = await reader.readexactly(size + 2)
        return data[:-2]

    def close(self) -> None:
        self._conn.close()


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bool]:
    """Status, lower-cased headers, and whether the connection may be reused."""
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise ProtocolError("response head too large") from None
    lines = raw.decode("latin-1").split("\r\n")
    status_line = lines[0].split(" ", 2)
    if len(status_line) < 2 or not status_line[0].startswith("HTTP/1."):
        raise ProtocolError(f"not an HTTP response: {lines[0][:80]!r}")
    status = int(status_line[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    keep = headers.get("connection", "").lower() != "close" and status_line[0] == "HTTP/1.1"
    if "content-length" not in headers and headers.get("transfer-encoding", "").lower() != "chunked":
        keep = False  # the body ends when the connection does
    return status, headers, keep


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    length = headers.get("content-length")
    if length is not None:
        return await reader.readexactly(int(length)) if int(length) else b""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        out = bytearray()
        while True:
            line = await reader.readline()
            size = int(line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                await reader.readline()
                return bytes(out)
            out += (await reader.readexactly(size + 2))[:-2]
    return await reader.read()
