"""Test support: the real `leo` broker on a temporary LEO_HOME and port 0, agents played by the
real `leo-mcp` (spoken to over stdio as a harness would) or by `leo call`, and a bare provider
client that keeps a tool alive without answering.

The binaries come from `LEO_BIN` and `LEO_MCP_BIN` (the Rust test that runs this suite sets
them), else from the workspace's `target/debug/`.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(HERE.parent / "src"))

WAIT = 20.0


def binary(env: str, name: str) -> str:
    path = os.environ.get(env) or str(ROOT / "target" / "debug" / name)
    if not os.path.isfile(path):
        raise RuntimeError(
            f"{name} is not built at {path}: run `cargo build -p leo-cli -p leo-mcp` "
            f"or set {env}"
        )
    return path


LEO = binary("LEO_BIN", "leo")
LEO_MCP = binary("LEO_MCP_BIN", "leo-mcp")


def wait_until(predicate, timeout: float = WAIT, what: str = "condition") -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


class Broker:
    """A running `leo broker`."""

    def __init__(self, config: str = "", home: str | None = None, tls: bool = False):
        self.home = home or tempfile.mkdtemp(prefix="leo-py-")
        if tls:
            # HTTPS with a CA from `leo tls init`, as a user sets it up.
            subprocess.run(
                [LEO, "tls", "init"], env={**os.environ, "LEO_HOME": self.home},
                check=True, capture_output=True,
            )
            config = "web:\n  tls:\n    cert: tls/server.pem\n    key: tls/server.key\n" + config
        if config:
            Path(self.home, "config.yaml").write_text(config)
        self.log_path = Path(self.home, "broker.stderr")
        self._start()

    def _start(self) -> None:
        env = {**os.environ, "LEO_HOME": self.home, "RUST_LOG": os.environ.get("RUST_LOG", "info")}
        self.proc = subprocess.Popen(
            [LEO, "broker", "--port", "0"], env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, text=True,
            stderr=open(self.log_path, "ab"),  # noqa: SIM115 - the child keeps it
        )
        end = time.monotonic() + WAIT
        assert self.proc.stdout is not None
        while time.monotonic() < end:
            line = self.proc.stdout.readline()
            if not line:
                break
            if line.startswith("leo broker listening on http"):
                self.addr = line.split("://", 1)[1].strip()
                threading.Thread(target=self._drain, daemon=True).start()
                return
        self.proc.kill()
        raise RuntimeError(f"leo broker did not start:\n{self.log()}")

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for _ in self.proc.stdout:
            pass

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    @property
    def ca_file(self) -> str:
        """The CA of a `tls=True` broker."""
        return os.path.join(self.home, "tls", "ca.pem")

    @property
    def socket(self) -> str:
        return os.path.join(self.home, "run", "leo.sock")

    @property
    def operator_token(self) -> str:
        return Path(self.home, "state", "operator.token").read_text().strip()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(WAIT)

    def restart(self) -> None:
        """Kills the broker and starts a new one on the same home."""
        self.kill()
        self._start()

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.home, ignore_errors=True)

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        conn = UnixHTTP(self.socket)
        headers = {"Authorization": f"Bearer {self.operator_token}"}
        data = None if body is None else json.dumps(body)
        if data is not None:
            headers["Content-Type"] = "application/json"
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        out = json.loads(resp.read() or b"null")
        conn.close()
        return resp.status, out

    def pending(self) -> list[dict[str, Any]]:
        status, body = self.request("GET", "/api/v1/client-tools/requests?pending=1")
        assert status == 200, body
        return body["data"]

    def tools(self) -> list[str]:
        status, body = self.request("GET", "/api/v1/client-tools")
        assert status == 200, body
        return sorted(t["name"] for t in body["data"]["tools"])


class UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path: str):
        super().__init__("localhost", timeout=WAIT)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(WAIT)
        self.sock.connect(self._path)


def leo_call(broker: Broker, tool: str, args: Any = None, *extra: str, timeout: float = WAIT):
    """`leo call TOOL ARGS` as an agent; returns (exit code, stdout, stderr)."""
    proc = spawn_call(broker, tool, args, *extra)
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out.strip(), err.strip()


def spawn_call(broker: Broker, tool: str, args: Any = None, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "LEO_HOME": broker.home}
    return subprocess.Popen(
        [LEO, "call", tool, json.dumps(args or {}), "--wait", "10", *extra],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )


#: A client name in leo-mcp's capability table (testdata/harnesscaps.json): native mode, where
#: the app's tools are listed and called as themselves.
NATIVE = "claude-code"


class McpAgent:
    """A harness: speaks MCP over stdio to a real `leo-mcp`, which uses its fallback tools
    (`leo_app_call`) since this client's name is in no capability table, or lists the tools
    natively with `client=NATIVE`. With `elicit` (params -> result) it declares MCP elicitation
    and answers `elicitation/create` with it, and with `sample` likewise sampling and
    `sampling/createMessage`; `notifications/progress` are kept by token, `notifications/message`
    in `logs`."""

    def __init__(
        self, broker: Broker, agent: str = "pytest", client: str = "leo-app-python-tests",
        elicit: Any = None, sample: Any = None,
    ):
        env = {**os.environ, "LEO_HOME": broker.home, "RUST_LOG": "warn"}
        self.log_path = Path(broker.home, f"leo-mcp-{agent}.stderr")
        self.proc = subprocess.Popen(
            [LEO_MCP, "--agent", agent], env=env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=open(self.log_path, "ab"),  # noqa: SIM115 - the child keeps it
        )
        self._next = 0
        self._answers: dict[int, Any] = {}
        self._lock = threading.Condition()
        self._elicit = elicit
        self._sample = sample
        #: Every `sampling/createMessage` params seen, in order.
        self.sampled: list[dict[str, Any]] = []
        #: Every `notifications/message` params seen, in order.
        self.logs: list[dict[str, Any]] = []
        #: Every `elicitation/create` params seen, in order.
        self.asked: list[dict[str, Any]] = []
        #: `notifications/progress` params by progress token, in order.
        self.progress: dict[Any, list[dict[str, Any]]] = {}
        threading.Thread(target=self._read, daemon=True).start()
        self.rpc("initialize", {
            "protocolVersion": "2025-06-18",
            "capabilities": {
                **({"elicitation": {}} if elicit is not None else {}),
                **({"sampling": {}} if sample is not None else {}),
            },
            "clientInfo": {"name": client, "version": "1"},
        })
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _send(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
        self.proc.stdin.flush()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            msg = json.loads(line)
            if "id" in msg and ("result" in msg or "error" in msg):
                with self._lock:
                    self._answers[msg["id"]] = msg
                    self._lock.notify_all()
            elif msg.get("method") == "notifications/progress":
                with self._lock:
                    self.progress.setdefault(msg["params"]["progressToken"], []).append(msg["params"])
                    self._lock.notify_all()
            elif msg.get("method") == "elicitation/create" and "id" in msg:
                with self._lock:
                    self.asked.append(msg["params"])
                result = self._elicit(msg["params"]) if self._elicit else {"action": "cancel"}
                self._send({"jsonrpc": "2.0", "id": msg["id"], "result": result})
            elif msg.get("method") == "notifications/message":
                with self._lock:
                    self.logs.append(msg["params"])
                    self._lock.notify_all()
            elif msg.get("method") == "sampling/createMessage" and "id" in msg and self._sample:
                with self._lock:
                    self.sampled.append(msg["params"])
                self._send({"jsonrpc": "2.0", "id": msg["id"], "result": self._sample(msg["params"])})
            elif "id" in msg and "method" in msg:
                self._send({"jsonrpc": "2.0", "id": msg["id"], "result": {}})  # ping, roots…

    def reports(self, token: Any, count: int) -> list[dict[str, Any]]:
        """Waits for `count` progress notifications on `token`."""
        with self._lock:
            if not self._lock.wait_for(lambda: len(self.progress.get(token, [])) >= count, WAIT):
                raise AssertionError(f"{count} progress reports on {token!r}: {self.progress}")
            return list(self.progress[token])

    def start_rpc(self, method: str, params: dict[str, Any]) -> int:
        with self._lock:
            self._next += 1
            rid = self._next
        self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return rid

    def answer(self, rid: int, timeout: float = WAIT) -> dict[str, Any]:
        with self._lock:
            if not self._lock.wait_for(lambda: rid in self._answers, timeout):
                raise AssertionError(f"leo-mcp did not answer {rid}: {self.log_path.read_text()}")
            msg = self._answers.pop(rid)
        if "error" in msg:
            raise AssertionError(f"MCP error: {msg['error']}")
        return msg["result"]

    def rpc(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        return self.answer(self.start_rpc(method, params))

    def start_call(self, tool: str, args: dict[str, Any]) -> int:
        return self.start_rpc("tools/call", {
            "name": "leo_app_call", "arguments": {"tool": tool, "args": args},
        })

    def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        return self.answer(self.start_call(tool, args))

    def start_native(self, tool: str, args: dict[str, Any], progress_token: Any = None) -> int:
        """`tools/call` of the tool itself (native mode), with a progress token if given."""
        params: dict[str, Any] = {"name": tool, "arguments": args}
        if progress_token is not None:
            params["_meta"] = {"progressToken": progress_token}
        return self.start_rpc("tools/call", params)

    def native(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        return self.answer(self.start_native(tool, args))

    def cancel(self, rid: int) -> None:
        self._send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": {"requestId": rid, "reason": "the user gave up"}})

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(WAIT)


class Other:
    """A bare provider: opens the event stream and registers a group, and never answers."""

    def __init__(self, broker: Broker, group: str, tools: list[str]):
        self.conn = UnixHTTP(broker.socket)
        self.conn.request("GET", "/api/v1/events?client_tools=1",
                          headers={"Authorization": f"Bearer {broker.operator_token}"})
        self.resp = self.conn.getresponse()
        assert self.resp.status == 200
        hello = self.next_event()
        assert hello[0] == "hello", hello
        self.client_id = hello[1]["client_id"]
        status, body = broker.request("POST", "/api/v1/client-tools", {
            "client_id": self.client_id, "group": group,
            "tools": [{"name": t, "description": f"The {t} tool",
                       "input_schema": {"type": "object"}} for t in tools],
        })
        assert status == 200, body

    def next_event(self) -> tuple[str, Any]:
        event, data = "message", None
        while True:
            line = self.resp.readline().decode().rstrip("\r\n")
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data = json.loads(line[5:].strip())
            elif not line and data is not None:
                return event, data

    def next_request(self) -> dict[str, Any]:
        while True:
            event, data = self.next_event()
            if event == "client_tool.request":
                return data

    def close(self) -> None:
        self.conn.close()


def text_of(result: dict[str, Any]) -> str:
    return "".join(b.get("text", "") for b in result.get("content", []) if b.get("type") == "text")


class Pipe:
    """A unix-socket relay in front of the broker's socket that the test can cut (every
    connection closed, new ones refused) and mend, to take an app away without a restart."""

    def __init__(self, broker: Broker):
        self.upstream = broker.socket
        self.path = os.path.join(broker.home, "pipe.sock")
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen(64)
        self.cut_off = False
        self.live: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self.server.accept()
            except OSError:
                return
            if self.cut_off:
                down.close()
                continue
            up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            up.connect(self.upstream)
            with self.lock:
                self.live += [down, up]
            for a, b in ((down, up), (up, down)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        self.cut_off = True
        with self.lock:
            live, self.live = self.live, []
        for s in live:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def mend(self) -> None:
        self.cut_off = False

    def close(self) -> None:
        self.cut()
        self.server.close()


class Postgres:
    """A throwaway database on the local PostgreSQL server (`LEO_TEST_POSTGRES`, else
    `postgresql://postgres@127.0.0.1:5432/postgres`), made and dropped with `psql`, as
    `leo_testkit::postgres` does for the Rust tests; `outage()` makes it unreachable for the
    broker (new connections refused, open ones terminated) until `back()`."""

    def __init__(self) -> None:
        self.admin = os.environ.get("LEO_TEST_POSTGRES") or "postgresql://postgres@127.0.0.1:5432/postgres"
        if shutil.which("psql") is None:
            raise RuntimeError("psql is missing: sudo apt-get install -y postgresql-client")
        self.name = f"leo_py_{os.getpid()}_{int(time.time() * 1000) % 10**9}"
        self.sql(f"CREATE DATABASE {self.name}")
        base, _, query = self.admin.partition("?")
        self.url = base.rsplit("/", 1)[0] + "/" + self.name + (f"?{query}" if query else "")

    def sql(self, statement: str) -> str:
        out = subprocess.run(
            ["psql", self.admin, "-v", "ON_ERROR_STOP=1", "-tAc", statement],
            check=False, capture_output=True, text=True, timeout=WAIT,
        )
        if out.returncode != 0:
            raise RuntimeError(f"psql {statement!r}: {out.stderr.strip()}")
        return out.stdout

    @property
    def config(self) -> str:
        return f'store:\n  url: "{self.url}"\n'

    def outage(self) -> None:
        self.sql(f"ALTER DATABASE {self.name} WITH ALLOW_CONNECTIONS false")
        self.sql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            f"WHERE datname = '{self.name}' AND pid <> pg_backend_pid()"
        )

    def back(self) -> None:
        self.sql(f"ALTER DATABASE {self.name} WITH ALLOW_CONNECTIONS true")

    def drop(self) -> None:
        self.sql(f"DROP DATABASE IF EXISTS {self.name} WITH (FORCE)")
