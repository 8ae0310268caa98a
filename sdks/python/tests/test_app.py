"""The Python SDK against the real broker and the real leo-mcp: every reply kind, typed
arguments, cancellation, the concurrency bound, reconnect and recovery, and the MCP features
(title, annotations, output schemas and structured replies, progress, questions)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import enum
import io
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import unittest
from pathlib import Path
from typing import Any, Literal, TypedDict

from support import (
    NATIVE,
    ROOT,
    Broker,
    McpAgent,
    Other,
    Pipe,
    Postgres,
    leo_call,
    spawn_call,
    text_of,
    wait_until,
)

from leo_app import (
    App,
    Call,
    InputUnsupported,
    LeoError,
    Read,
    ReadError,
    Refused,
    Reply,
    ToolError,
    _codes,
    content,
    schema_of,
)

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Point(TypedDict):
    x: int
    y: int


@dataclasses.dataclass
class Box:
    """A box"""

    width: float
    label: str = "box"


# pydantic is optional for users of the package, but the suite tests it: it is in
# tests/requirements.txt, and a missing one fails here rather than skipping.
import pydantic


class Inner(pydantic.BaseModel):
    n: int


class Outer(pydantic.BaseModel):
    inner: Inner
    items: list[Inner] = []


class Case(unittest.TestCase):
    def setUp(self) -> None:
        self.broker = Broker()
        self.addCleanup(self.broker.close)
        self.apps: list[App] = []

    def start(self, app: App) -> App:
        app.start()
        self.addCleanup(app.stop, 10)
        app.wait_serving()
        return app

    def agent(self) -> McpAgent:
        a = McpAgent(self.broker)
        self.addCleanup(a.close)
        return a


class Replies(Case):
    def test_every_reply_kind_reaches_the_agent(self) -> None:
        app = App("kinds", home=self.broker.home)

        @app.tool(answers_at_once=True)
        def text(s: str) -> str:
            "Text"
            return s

        @app.tool
        def as_json(n: int) -> dict:
            "JSON"
            return {"n": n, "list": [1, 2]}

        @app.tool
        async def image() -> Reply:
            "An image"
            return Reply.image(PNG, "image/png")

        @app.tool
        def blocks() -> Reply:
            "Several blocks"
            return Reply.content([
                content.text("one"),
                content.resource_link("file:///tmp/a.txt", "a.txt"),
                content.resource("file:///tmp/b.txt", text="bee"),
                content.audio(b"\x00\x01", "audio/wav"),
            ])

        @app.tool(answers_at_once=True)
        def fails(why: str) -> str:
            "Fails"
            raise ToolError("not_allowed", why)

        @app.tool
        def crashes() -> str:
            "Crashes"
            raise ValueError("boom")

        @app.tool
        def bad_content() -> Reply:
            "Bad content"
            return Reply.content([{"type": "image", "data": "not base64!", "mimeType": "x"}])

        self.start(app)
        agent = self.agent()
        self.assertEqual(agent.call("text", {"s": "hé"})["content"], [{"type": "text", "text": "hé"}])
        self.assertEqual(json.loads(text_of(agent.call("as_json", {"n": 3}))), {"n": 3, "list": [1, 2]})
        img = agent.call("image", {})["content"][0]
        self.assertEqual((img["type"], img["mimeType"]), ("image", "image/png"))
        self.assertEqual(base64.b64decode(img["data"]), PNG)
        got = agent.call("blocks", {})["content"]
        self.assertEqual([b["type"] for b in got], ["text", "resource_link", "resource", "audio"])
        self.assertEqual(got[2]["resource"], {"uri": "file:///tmp/b.txt", "text": "bee"})
        failed = agent.call("fails", {"why": "no way"})
        self.assertTrue(failed["isError"])
        self.assertIn("not_allowed: no way", text_of(failed))
        crashed = agent.call("crashes", {})
        self.assertTrue(crashed["isError"])
        self.assertIn("internal: the tool's handler raised ValueError: boom", text_of(crashed))
        refused = agent.call("bad_content", {})
        self.assertTrue(refused["isError"])
        self.assertIn("invalid_result", text_of(refused))

    def test_typed_arguments_are_checked_by_the_broker_and_converted(self) -> None:
        app = App("typed", home=self.broker.home)
        seen: dict = {}

        @app.tool
        def shapes(
            box: Box, colour: Colour, where: Point, mode: Literal["a", "b"] = "a",
            tags: list[str] | None = None, ratio: float = 1.0,
        ) -> str:
            "Shapes"
            seen.update(box=box, colour=colour, where=where, mode=mode, tags=tags, ratio=ratio)
            return "ok"

        self.start(app)
        schema = app.tools["shapes"].input_schema
        self.assertEqual(schema["required"], ["box", "colour", "where"])
        self.assertEqual(schema["properties"]["colour"], {"enum": ["red", "blue"], "type": "string"})
        self.assertEqual(schema["properties"]["tags"]["type"] if "type" in schema["properties"]["tags"]
                         else schema["properties"]["tags"]["anyOf"][1], {"type": "null"})
        rc, out, err = leo_call(self.broker, "shapes", {
            "box": {"width": 2}, "colour": "blue", "where": {"x": 1, "y": 2}, "ratio": 3,
        })
        self.assertEqual((rc, out), (0, "ok"), err)
        self.assertEqual(seen["box"], Box(width=2.0))
        self.assertIs(seen["colour"], Colour.BLUE)
        self.assertEqual(seen["where"], {"x": 1, "y": 2})
        self.assertIsInstance(seen["ratio"], float)
        rc, _, err = leo_call(self.broker, "shapes", {"box": {}, "colour": "green", "where": {}})
        self.assertEqual(rc, 1)
        self.assertIn("invalid_arguments", err)

    def test_pydantic_models_are_inlined(self) -> None:
        schema = schema_of(Outer)
        self.assertNotIn("$defs", json.dumps(schema))
        self.assertNotIn("$ref", json.dumps(schema))
        app = App("pyd", home=self.broker.home)

        @app.tool
        def nested(value: Outer) -> str:
            "Nested"
            return str(value.inner.n + len(value.items))

        self.start(app)
        rc, out, err = leo_call(self.broker, "nested", {"value": {"inner": {"n": 4}, "items": [{"n": 1}]}})
        self.assertEqual((rc, out), (0, "5"), err)


class Cancellation(Case):
    def test_an_agent_cancel_reaches_an_async_handler_and_no_reply_is_posted(self) -> None:
        app = App("slow", home=self.broker.home)
        started, stopped = threading.Event(), threading.Event()

        @app.tool
        async def wait(call: Call) -> str:
            "Waits"
            started.set()
            await call.wait_cancelled()
            call.progress(1, message="late")  # quiet for an ended call: never raises
            stopped.set()
            return "too late"

        self.start(app)
        agent = self.agent()
        rid = agent.start_call("wait", {})
        self.assertTrue(started.wait(20))
        agent.cancel(rid)
        self.assertTrue(stopped.wait(20), "the handler saw the cancellation")
        wait_until(lambda: not self.broker.pending(), what="the call ended")

    def test_a_timeout_reaches_a_plain_handler(self) -> None:
        app = App("slow", home=self.broker.home, cancel_grace=0.5)
        stopped = threading.Event()

        @app.tool(timeout_s=1)
        def block(call: Call) -> str:
            "Blocks"
            call.cancel_event.wait(20)
            stopped.set()
            return "late"

        self.start(app)
        rc, _, err = leo_call(self.broker, "block", {})
        self.assertEqual(rc, 1)
        self.assertIn("timeout", err)
        self.assertTrue(stopped.wait(20))


class Concurrency(Case):
    def test_at_most_max_concurrent_calls_run_and_the_rest_wait_unclaimed(self) -> None:
        app = App("busy", home=self.broker.home, max_concurrent=2)
        running, peak, lock = [0], [0], threading.Lock()
        release = asyncio.Event()
        loop_box: list = []

        @app.tool
        async def work(n: int) -> str:
            "Works"
            loop_box[:] = [asyncio.get_running_loop()]
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            await release.wait()
            with lock:
                running[0] -= 1
            return f"done {n}"

        self.start(app)
        calls = [spawn_call(self.broker, "work", {"n": i}) for i in range(4)]
        self.addCleanup(lambda: [c.kill() for c in calls])

        def states() -> list[str]:
            return sorted(r["state"] for r in self.broker.pending())

        # Four calls listed may come before the second claim: wait for the two claims.
        wait_until(lambda: states() == ["claimed", "claimed", "parked", "parked"],
                   what="two calls claimed and two waiting")
        time.sleep(0.3)
        self.assertEqual(states(), ["claimed", "claimed", "parked", "parked"])
        self.assertEqual(peak[0], 2)
        loop_box[0].call_soon_threadsafe(release.set)
        outs = sorted(c.communicate(timeout=20)[0].strip() for c in calls)
        self.assertEqual(outs, [f"done {i}" for i in range(4)])
        self.assertEqual(peak[0], 2)


class Announcement(Case):
    def test_the_app_says_once_on_stderr_which_tools_it_serves_and_where(self) -> None:
        app = App("text", name="scribe", home=self.broker.home, backoff=(0.05, 0.5))

        @app.tool
        def shout(text: str) -> str:
            "Shout"
            return text.upper()

        @app.tool(group="count")
        def count(text: str) -> int:
            "Count"
            return len(text)

        said = io.StringIO()
        with contextlib.redirect_stderr(said):
            self.start(app)
            self.broker.restart()
            wait_until(lambda: self.broker.tools() == ["count", "shout"], what="registered again")
            self.assertTrue(app.wait_status("serving"))
        lines = [line for line in said.getvalue().splitlines() if line.startswith("leo_app:")]
        socket = Path(self.broker.home, "run", "leo.sock")
        self.assertEqual(
            lines,
            [f'leo_app: app "scribe" serving shout (group text); count (group count) on unix:{socket}'],
        )


class Reconnect(Case):
    def test_the_app_serves_again_after_a_broker_restart(self) -> None:
        app = App("echo", home=self.broker.home, backoff=(0.05, 0.5))

        @app.tool(answers_at_once=True)
        def echo(text: str) -> str:
            "Echo"
            return f"app: {text}"

        self.start(app)
        first = app.client_id
        self.assertEqual(leo_call(self.broker, "echo", {"text": "a"})[1], "app: a")
        self.broker.restart()
        wait_until(lambda: self.broker.tools() == ["echo"], what="the app registered again")
        self.assertTrue(app.wait_status("serving"))
        self.assertEqual(app.client_id, first, "the stream resumed with its key")
        rc, out, err = leo_call(self.broker, "echo", {"text": "b"})
        self.assertEqual((rc, out), (0, "app: b"), err)

    def test_an_app_over_https_answers_a_call(self) -> None:
        broker = Broker(tls=True)
        self.addCleanup(broker.close)
        port = broker.addr.rpartition(":")[2]
        app = App(
            "secure", url=f"https://localhost:{port}", ca_file=broker.ca_file,
            token=broker.operator_token,
        )

        @app.tool(answers_at_once=True)
        def secure_echo(text: str) -> str:
            "Echo over TLS"
            return f"tls: {text}"

        self.start(app)
        self.assertEqual(str(app.endpoint), f"https://localhost:{port}")
        rc, out, err = leo_call(broker, "secure_echo", {"text": "a"})
        self.assertEqual((rc, out), (0, "tls: a"), err)

    def test_an_untrusted_broker_certificate_is_a_clear_error(self) -> None:
        broker = Broker(tls=True)
        self.addCleanup(broker.close)
        from leo_app import _http

        # Without the CA the handshake fails, and says which variable to set.
        client = _http.Client(_http.Endpoint.from_url(f"https://{broker.addr}"), "t")
        with self.assertRaises(LeoError) as e:
            asyncio.run(client.get("/api/v1/status"))
        self.assertIn("not signed by a CA this client trusts", str(e.exception))
        self.assertIn("LEO_CA_FILE", str(e.exception))

    def test_a_request_parked_before_the_app_subscribed_is_served(self) -> None:
        other = Other(self.broker, "echo", ["echo"])
        self.addCleanup(other.close)
        call = spawn_call(self.broker, "echo", {"text": "early"})
        self.addCleanup(call.kill)
        other.next_request()
        app = App("echo", home=self.broker.home)

        @app.tool
        def echo(text: str) -> str:
            "Echo"
            return f"app: {text}"

        self.start(app)
        out, err = call.communicate(timeout=20)
        self.assertEqual(out.strip(), "app: early", err)


class Held:
    """A tool whose calls wait until the test lets each go; records what the app logs."""

    def __init__(self, app: App):
        self.started: dict[int, threading.Event] = {}
        self.release: dict[int, threading.Event] = {}
        self.logged: list[str] = []
        for n in (1, 2):
            self.started[n], self.release[n] = threading.Event(), threading.Event()

        @app.tool
        def hold(n: int) -> str:
            "Holds the call until the test lets it go"
            self.started[n].set()
            self.release[n].wait(60)
            return f"held {n}"

        held = self

        class Keep(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                held.logged.append(record.getMessage())

        logger = logging.getLogger("leo_app")
        self.handler = Keep()
        logger.addHandler(self.handler)
        logger.setLevel(logging.INFO)

    def close(self) -> None:
        for e in self.release.values():
            e.set()
        logging.getLogger("leo_app").removeHandler(self.handler)

    def waiting(self) -> bool:
        return any("waits for the broker" in m for m in self.logged)


class Resume(Case):
    def held_app(self, **kw: Any) -> tuple[App, Held]:
        app = App("hold", home=self.broker.home, backoff=(0.05, 0.5), **kw)
        held = Held(app)
        self.addCleanup(held.close)
        return app, held

    def test_claims_survive_a_broker_kill_and_the_agent_gets_both_results(self) -> None:
        app, held = self.held_app()
        first = self.start(app).client_id
        agent = self.agent()
        before = agent.start_call("hold", {"n": 1})
        after = agent.start_call("hold", {"n": 2})
        for n in (1, 2):
            self.assertTrue(held.started[n].wait(20))
        wait_until(lambda: [r["claimed_by"] for r in self.broker.pending()] == [first, first],
                   what="both calls claimed by the app")
        self.broker.kill()
        # The first reply is posted while the broker is down: it waits for the next session.
        held.release[1].set()
        wait_until(held.waiting, what="the reply to wait for the broker")
        self.broker.restart()
        wait_until(lambda: self.broker.tools() == ["hold"], what="the app registered again")
        self.assertTrue(app.wait_status("serving"))
        self.assertEqual(app.client_id, first, "the app resumed as the same client")
        second = [r for r in self.broker.pending() if r["arguments"] == {"n": 2}]
        self.assertEqual([r["claimed_by"] for r in second], [first], "its claim kept")
        # The second call is answered after the restart, by the same client.
        held.release[2].set()
        self.assertEqual(text_of(agent.answer(before)), "held 1")
        self.assertEqual(text_of(agent.answer(after)), "held 2")
        wait_until(lambda: not self.broker.pending(), what="no call left")

    def test_a_call_claimed_without_hearing_so_is_run_after_a_broker_kill(self) -> None:
        app, held = self.held_app(max_concurrent=1)
        client_id = self.start(app).client_id
        agent = self.agent()
        first = agent.start_call("hold", {"n": 1})
        self.assertTrue(held.started[1].wait(20))
        # The second call waits in the app for the only slot. Its claim is taken as the app's
        # own whose answer the kill lost: the broker holds it for this client, the app never
        # heard.
        second = agent.start_call("hold", {"n": 2})
        rid = wait_until(
            lambda: next((r["id"] for r in self.broker.pending() if r["arguments"] == {"n": 2}), None),
            what="the second call",
        )
        status, body = self.broker.request(
            "POST", f"/api/v1/client-tools/requests/{rid}/claim", {"client_id": client_id}
        )
        self.assertEqual(status, 200, body)
        self.broker.restart()
        wait_until(lambda: self.broker.tools() == ["hold"], what="the app registered again")
        held.release[1].set()
        held.release[2].set()
        self.assertEqual(text_of(agent.answer(first)), "held 1")
        self.assertEqual(text_of(agent.answer(second)), "held 2")
        wait_until(lambda: not self.broker.pending(), what="no call left")

    def test_a_refused_key_connects_a_new_client_that_still_answers(self) -> None:
        self.broker.close()
        self.broker = Broker("client_tools:\n  resume_grace_s: 1\n")
        self.addCleanup(self.broker.close)
        other = Other(self.broker, "hold", ["hold"])  # keeps the tool alive while the app is away
        self.addCleanup(other.close)
        pipe = Pipe(self.broker)
        self.addCleanup(pipe.close)
        app, held = self.held_app(socket=pipe.path)
        first = self.start(app).client_id
        agent = self.agent()
        rid = agent.start_call("hold", {"n": 1})
        self.assertTrue(held.started[1].wait(20))
        pipe.cut()
        # Past the grace the claim is given up: the call is parked and offered again.
        wait_until(lambda: [r["state"] for r in self.broker.pending()] == ["parked"],
                   what="the claim given up")
        held.release[1].set()
        wait_until(held.waiting, what="the reply to wait for the broker")
        pipe.mend()
        wait_until(lambda: app.status == "serving" and app.client_id not in (None, first),
                   what="a new client")
        self.assertEqual(text_of(agent.answer(rid)), "held 1")
        self.assertTrue(any("refused the resume key" in m for m in held.logged), held.logged)


class Recovery(unittest.TestCase):
    def test_requests_that_waited_while_the_app_was_away_are_served_when_it_returns(self) -> None:
        # The ring keeps one event, so of two requests made while the app is away only the last
        # is replayed on Last-Event-ID: the first reaches it through the pending list alone.
        broker = Broker("client_tools:\n  replay_events: 1\n")
        self.addCleanup(broker.close)
        other = Other(broker, "echo", ["echo"])
        self.addCleanup(other.close)
        pipe = Pipe(broker)
        self.addCleanup(pipe.close)
        app = App("echo", home=broker.home, socket=pipe.path, backoff=(0.05, 0.2))

        @app.tool
        def echo(text: str) -> str:
            "Echo"
            return f"app: {text}"

        app.start()
        self.addCleanup(app.stop, 10)
        app.wait_serving()
        self.assertEqual(leo_call(broker, "echo", {"text": "a"})[1], "app: a")
        other.next_request()
        pipe.cut()
        self.assertTrue(app.wait_status("serving", not_=True))
        first = spawn_call(broker, "echo", {"text": "b"})
        second = spawn_call(broker, "echo", {"text": "c"})
        self.addCleanup(first.kill)
        self.addCleanup(second.kill)
        other.next_request()
        other.next_request()
        self.assertEqual(len(broker.pending()), 2)
        pipe.mend()
        self.assertEqual(first.communicate(timeout=20)[0].strip(), "app: b")
        self.assertEqual(second.communicate(timeout=20)[0].strip(), "app: c")


class StoreOutage(unittest.TestCase):
    def test_a_claim_and_a_result_refused_store_unavailable_still_reach_the_agent(self) -> None:
        # A real broker on a real PostgreSQL store that goes away for a while: the broker
        # answers the app's result and claim `503 store_unavailable` meanwhile.
        db = Postgres()
        self.addCleanup(db.drop)
        self.addCleanup(db.back)
        broker = Broker(db.config)
        self.addCleanup(broker.close)
        app = App("outage", home=broker.home, max_concurrent=2, backoff=(0.05, 0.5),
                  cancel_grace=0.2)
        release = threading.Event()
        self.addCleanup(release.set)
        logged: list[str] = []

        @app.tool(timeout_s=2)
        async def expire() -> str:
            "Holds its slot until the broker ends the call (timeout)"
            await asyncio.sleep(60)
            return "never"

        @app.tool
        def hold(n: int) -> str:
            "Answers once the test lets it go"
            release.wait(60)
            return f"held {n}"

        class Keep(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                logged.append(record.getMessage())

        logger = logging.getLogger("leo_app")
        keep = Keep()
        logger.addHandler(keep)
        level = logger.level
        logger.setLevel(logging.INFO)
        self.addCleanup(logger.setLevel, level)
        self.addCleanup(logger.removeHandler, keep)
        app.start()
        self.addCleanup(app.stop, 10)
        app.wait_serving()

        expiring = spawn_call(broker, "expire")
        self.addCleanup(expiring.kill)
        wait_until(lambda: len(broker.pending()) == 1, what="the first call claimed")
        held = spawn_call(broker, "hold", {"n": 1})
        self.addCleanup(held.kill)
        wait_until(lambda: sorted(r["state"] for r in broker.pending()) == ["claimed", "claimed"],
                   what="both slots taken")
        waiting = spawn_call(broker, "hold", {"n": 2})
        self.addCleanup(waiting.kill)
        wait_until(lambda: len(broker.pending()) == 3, what="a third call waiting unclaimed")
        db.outage()
        # The result of the held call meets the outage; then the first call times out, its slot
        # frees, and the claim of the waiting one meets it too.
        release.set()
        wait_until(lambda: any("waits for the broker's store" in m for m in logged),
                   what="a result refused store_unavailable")
        wait_until(lambda: any("claim of" in m and "store_unavailable" in m for m in logged),
                   what="a claim refused store_unavailable")
        time.sleep(0.5)
        db.back()
        self.assertEqual(held.communicate(timeout=20)[0].strip(), "held 1")
        self.assertEqual(waiting.communicate(timeout=20)[0].strip(), "held 2", broker.log())

    def test_an_app_started_while_the_store_is_away_serves_once_it_is_back(self) -> None:
        # The broker answers `503 store_unavailable` meanwhile (its stream, or with
        # pin_definitions a registration: the shared table's register_again): the app keeps
        # trying.
        db = Postgres()
        self.addCleanup(db.drop)
        self.addCleanup(db.back)
        broker = Broker(db.config + "client_tools:\n  pin_definitions: true\n")
        self.addCleanup(broker.close)
        db.outage()

        def refuses_work() -> bool:
            try:
                return broker.request("POST", "/web/agent/rocket/message",
                                      {"text": "t", "from": "ops"})[0] == 503
            except ConnectionError:
                # The instance is changing roles as its database goes (a connection taken
                # in that moment may close unanswered); the app below retries the same way.
                return False

        wait_until(refuses_work, what="the broker refusing work without its store")
        app = App("outage", home=broker.home, backoff=(0.05, 0.2))

        @app.tool
        def echo(n: int) -> str:
            "Echoes n"
            return f"echo {n}"

        app.start()
        self.addCleanup(app.stop, 10)
        time.sleep(2)  # several refused attempts
        self.assertIn(app.status, ("waiting", "connecting"))
        db.back()
        app.wait_serving()
        self.assertEqual(leo_call(broker, "echo", {"n": 7})[1], "echo 7")


class Scope(Case):
    def test_a_group_for_chosen_agents_reaches_them_and_no_other(self) -> None:
        app = App("open", home=self.broker.home, agents={"deploy": ["rocket", "ci-*"]})

        @app.tool(group="deploy")
        def deploy_now() -> str:
            "Deploys"
            return "deployed"

        @app.tool
        def open_tool() -> str:
            "Open to all"
            return "open"

        self.start(app)
        ci = McpAgent(self.broker, "ci-7")
        self.addCleanup(ci.close)
        self.assertEqual(text_of(ci.call("deploy_now", {})), "deployed")
        scout = McpAgent(self.broker, "scout")
        self.addCleanup(scout.close)
        self.assertEqual(text_of(scout.call("open_tool", {})), "open")
        refused = scout.call("deploy_now", {})
        self.assertTrue(refused["isError"])
        self.assertIn("no_client", text_of(refused))
        listed = text_of(scout.rpc("tools/call", {"name": "leo_app_tools", "arguments": {}}))
        self.assertIn("open_tool", listed)
        self.assertNotIn("deploy_now", listed)


class Record(TypedDict):
    build: int
    url: str


@dataclasses.dataclass
class Tally:
    words: int
    lines: int = 1


CONFIRM_FORM = {
    "type": "object",
    "properties": {
        "confirm": {"type": "boolean", "title": "Go ahead?"},
        "env": {"type": "string", "enum": ["prod", "staging"]},
    },
    "required": ["confirm"],
}


class Features(Case):
    """What MCP gives beyond content: shown to a native-mode harness (`tools/list`)."""

    def native(self, **kw) -> McpAgent:
        a = McpAgent(self.broker, client=NATIVE, **kw)
        self.addCleanup(a.close)
        return a

    def test_prompts_resources_and_completions_reach_the_agent_as_written(self) -> None:
        app = App("docs", home=self.broker.home)
        pixel = base64.b64encode(PNG).decode()

        @app.prompt("greet", description="Greets someone",
                    arguments=[{"name": "name", "description": "Who to greet", "required": True}],
                    complete=lambda read: {"completion": {"values": ["Ada", "Alan"]}})
        def greet(read: Read) -> dict[str, Any]:
            return {"messages": [
                {"role": "user", "content": {"type": "text", "text": f"Say hello to {read.argument('name')}"}},
                {"role": "user", "content": {"type": "image", "data": pixel, "mimeType": "image/png"}},
            ]}

        @app.resource("test://pixel.png", name="pixel", mime_type="image/png")
        async def blob(read: Read) -> dict[str, Any]:
            return {"contents": [{"uri": read.uri, "mimeType": "image/png", "blob": pixel}]}

        @app.resource_template("test://items/{id}", name="item")
        def item(read: Read) -> dict[str, Any]:
            if read.uri == "test://items/missing":
                raise ReadError("not_found", "no such item")
            return {"contents": [{"uri": read.uri, "text": f"item at {read.uri}"}]}

        self.start(app)  # a group of prompts and resources alone, without tools
        agent = self.native()
        prompts = agent.rpc("prompts/list", {})["prompts"]
        self.assertEqual(prompts[0]["name"], "greet")
        got = agent.rpc("prompts/get", {"name": "greet", "arguments": {"name": "Ada"}})
        self.assertEqual(got["messages"][0]["content"]["text"], "Say hello to Ada")
        self.assertEqual(got["messages"][1]["content"]["data"], pixel)
        resources = agent.rpc("resources/list", {})["resources"]
        self.assertEqual(resources, [{"uri": "test://pixel.png", "name": "pixel", "mimeType": "image/png"}])
        templates = agent.rpc("resources/templates/list", {})["resourceTemplates"]
        self.assertEqual(templates[0]["uriTemplate"], "test://items/{id}")
        read = agent.rpc("resources/read", {"uri": "test://pixel.png"})
        self.assertEqual(read["contents"][0]["blob"], pixel)
        read = agent.rpc("resources/read", {"uri": "test://items/7"})
        self.assertEqual(read["contents"][0]["text"], "item at test://items/7")
        with self.assertRaisesRegex(AssertionError, "not_found: no such item"):
            agent.rpc("resources/read", {"uri": "test://items/missing"})
        done = agent.rpc("completion/complete", {
            "ref": {"type": "ref/prompt", "name": "greet"}, "argument": {"name": "name", "value": "A"}})
        self.assertEqual(done["completion"]["values"], ["Ada", "Alan"])
        with self.assertRaises(ValueError):
            app.resource("test://pixel.png", name="again")(blob)

    def test_a_changed_resource_reaches_the_sessions_offered_it(self) -> None:
        app = App("docs", home=self.broker.home)

        @app.resource("test://notes", name="notes")
        def notes(read: Read) -> dict[str, Any]:
            return {"contents": [{"uri": "test://notes", "text": "kept"}]}

        self.start(app)
        self.native()
        # Once the agent's leo-mcp has connected, its session is told.
        wait_until(lambda: app.resource_updated("test://notes") == 1, what="one session told")
        with self.assertRaisesRegex(Refused, "not_found"):
            app.resource_updated("test://elsewhere")

    def test_title_annotations_and_output_schema_are_listed_natively(self) -> None:
        app = App("mcp", home=self.broker.home)

        @app.tool(title="Build record", annotations={"readOnlyHint": True, "openWorldHint": False})
        def record(build: int) -> Record:
            "Return the build record"
            return {"build": build, "url": f"https://ci.example/{build}"}

        @app.tool(annotations={"destructiveHint": True}, execution="task", timeout_s=60,
                  output_schema={"type": "object", "properties": {"gone": {"type": "integer"}}})
        def wipe() -> dict:
            "Wipe the cache"
            return {"gone": 1}

        @app.tool(output_schema=False)
        def plain() -> Tally:
            "No output schema"
            return Tally(words=1)

        self.start(app)
        tools = {t["name"]: t for t in self.native().rpc("tools/list", {})["tools"]}
        self.assertEqual(tools["record"]["title"], "Build record")
        self.assertEqual(tools["record"]["annotations"], {"readOnlyHint": True, "openWorldHint": False})
        self.assertEqual(tools["record"]["outputSchema"], schema_of(Record))
        self.assertEqual(tools["wipe"]["annotations"], {"destructiveHint": True})
        self.assertEqual(tools["wipe"]["outputSchema"]["properties"], {"gone": {"type": "integer"}})
        self.assertNotIn("outputSchema", tools["plain"])
        status, body = self.broker.request("GET", "/api/v1/client-tools")
        self.assertEqual(status, 200, body)
        listed = {t["name"]: t for t in body["data"]["tools"]}
        self.assertEqual(listed["wipe"]["execution"], "task")
        self.assertNotIn("execution", listed["record"])
        with self.assertRaises(ValueError):
            app.tool(lambda: "", description="x", name="bad", annotations={"readOnly": True})
        with self.assertRaises(ValueError):
            app.tool(lambda: "", description="x", name="bad", execution="later")

    def test_structured_replies_reach_the_harness_and_a_wrong_one_is_the_apps_error(self) -> None:
        app = App("mcp", home=self.broker.home)

        @app.tool
        async def record(build: int) -> Record:
            "Return the build record"
            return {"build": build, "url": f"https://ci.example/{build}"}

        @app.tool(answers_at_once=True)
        def tally(text: str) -> Tally:
            "Count words"
            return Tally(words=len(text.split()), lines=2)

        @app.tool(output_schema=Record)
        def broken() -> dict:
            "Answers a record that does not match the schema"
            return {"build": "seven", "url": "u"}

        @app.tool(output_schema=Record)
        def text_only() -> str:
            "Answers text where a record is due"
            return "no record"

        @app.tool
        def summary() -> Reply:
            "Structured content with blocks of its own"
            return Reply.structured({"n": 1}, [content.text("one")])

        self.start(app)
        agent = self.native()
        got = agent.native("record", {"build": 7})
        self.assertEqual(got["structuredContent"], {"build": 7, "url": "https://ci.example/7"})
        self.assertEqual(json.loads(text_of(got)), got["structuredContent"])
        self.assertFalse(got.get("isError", False))
        self.assertEqual(agent.native("tally", {"text": "a b c"})["structuredContent"],
                         {"words": 3, "lines": 2})
        got = agent.native("summary", {})
        self.assertEqual((got["structuredContent"], got["content"]),
                         ({"n": 1}, [{"type": "text", "text": "one"}]))
        refused = agent.native("broken", {})
        self.assertTrue(refused["isError"])
        self.assertIn("invalid_result: at $.structured_content.build", text_of(refused))
        missing = agent.native("text_only", {})
        self.assertTrue(missing["isError"])
        self.assertIn("invalid_result: at $.structured_content: required", text_of(missing))
        self.assertTrue(Reply.structured([1, 2]).is_error)

    def test_progress_with_messages_reaches_the_harness_from_async_and_plain_handlers(self) -> None:
        app = App("mcp", home=self.broker.home)
        loop_box: list = []
        go_async, go_plain = asyncio.Event(), threading.Event()
        at_once_error: list[str] = []

        @app.tool
        async def deploy(call: Call) -> str:
            "Deploys, reporting progress"
            loop_box[:] = [asyncio.get_running_loop()]
            call.progress(1, 3, "building")
            call.progress(2, 3, "uploading")
            await go_async.wait()
            return "deployed"

        @app.tool
        def build(call: Call) -> str:
            "Builds in a thread, reporting progress"
            call.progress(0.5, message="half way")
            go_plain.wait(20)
            call.progress(1, message="done")
            return "built"

        @app.tool(answers_at_once=True)
        def quick(call: Call) -> str:
            "Answers at once"
            try:
                call.progress(1)
            except LeoError as e:
                at_once_error.append(str(e))
            return "quick"

        self.start(app)
        agent = self.native()
        first = agent.start_native("deploy", {}, progress_token="d")
        reports = agent.reports("d", 2)
        self.assertEqual([(r["progress"], r.get("total"), r.get("message")) for r in reports[:2]],
                         [(1, 3, "building"), (2, 3, "uploading")])
        loop_box[0].call_soon_threadsafe(go_async.set)
        self.assertEqual(text_of(agent.answer(first)), "deployed")
        second = agent.start_native("build", {}, progress_token=7)
        self.assertEqual(agent.reports(7, 1)[0]["message"], "half way")
        go_plain.set()
        self.assertEqual(text_of(agent.answer(second)), "built")
        self.assertIn("done", [r.get("message") for r in agent.reports(7, 2)])
        self.assertEqual(text_of(agent.native("quick", {})), "quick")
        self.assertIn("answers at once", at_once_error[0])

    def test_questions_are_answered_declined_or_unsupported(self) -> None:
        app = App("mcp", home=self.broker.home)

        @app.tool
        async def confirm(call: Call) -> dict:
            "Asks twice"
            try:
                yes = await call.ask("Deploy build 7 to production?", CONFIRM_FORM)
                no = await call.ask("Also wipe the cache?", CONFIRM_FORM)
            except InputUnsupported as e:
                return {"fallback": e.code}
            return {"yes": [yes.action, yes.content, yes.accepted], "no": [no.action, no.content]}

        @app.tool
        def confirm_plain(call: Call) -> dict:
            "Asks from a thread"
            answer = call.ask_blocking("Go?", CONFIRM_FORM)
            return {"action": answer.action, "content": answer.content}

        @app.tool
        async def bad_form(call: Call) -> str:
            "Asks with a form outside the subset"
            try:
                await call.ask("x", {"type": "object", "properties": {"a": {"type": "object"}}})
            except InputUnsupported:
                return "unsupported"
            except LeoError as e:
                return str(e)
            return "asked"

        self.start(app)

        def user(params):
            if params["message"].startswith("Also"):
                return {"action": "decline"}
            return {"action": "accept", "content": {"confirm": True, "env": "prod"}}

        asker = self.native(elicit=user)
        got = json.loads(text_of(asker.native("confirm", {})))
        self.assertEqual(got, {"yes": ["accept", {"confirm": True, "env": "prod"}, True],
                               "no": ["decline", None]})
        self.assertEqual(asker.asked[0]["requestedSchema"], CONFIRM_FORM)
        self.assertEqual(asker.asked[0]["mode"], "form")
        self.assertEqual(json.loads(text_of(asker.native("confirm_plain", {}))),
                         {"action": "accept", "content": {"confirm": True, "env": "prod"}})
        self.assertIn("invalid_parameter: at $.requested_schema.properties.a.type",
                      text_of(asker.native("bad_form", {})))
        plain = self.agent()  # declares no elicitation (and runs in fallback mode)
        self.assertEqual(json.loads(text_of(plain.call("confirm", {}))), {"fallback": "input_unsupported"})

    def test_an_older_harness_gets_titled_choices_spelled_its_way_and_no_multi_select(self) -> None:
        app = App("mcp", home=self.broker.home)
        titled = {"type": "object", "properties": {"size": {"type": "string", "oneOf": [
            {"const": "s", "title": "Small"}, {"const": "l", "title": "Large"}]}}}
        multi = {"type": "object", "properties": {"tags": {"type": "array", "items": {
            "type": "string", "enum": ["fast", "safe"]}}}}

        @app.tool
        async def choose(call: Call) -> str:
            "Asks with titled choices, then with a multi select"
            answer = await call.ask("Size?", titled)
            try:
                await call.ask("Tags?", multi)
            except InputUnsupported as e:
                return f"{answer.content}; {e.message}"
            return "asked twice"

        self.start(app)
        asker = self.native(elicit=lambda params: {"action": "accept", "content": {"size": "l"}})
        said = text_of(asker.native("choose", {}))
        # The harness speaks 2025-06-18: the same choices as enum and enumNames.
        self.assertEqual(asker.asked[0]["requestedSchema"]["properties"]["size"], {
            "type": "string", "enum": ["s", "l"], "enumNames": ["Small", "Large"]})
        self.assertEqual(len(asker.asked), 1)
        self.assertTrue(said.startswith("{'size': 'l'}; at $.requested_schema.properties.tags: "
                                        "a multi select needs"), said)

    def test_log_messages_pass_the_harness_level_and_sampling_reaches_its_model(self) -> None:
        app = App("mcp", home=self.broker.home)

        @app.tool
        async def summarize(call: Call) -> str:
            "Logs, then asks the model"
            call.log("info", "reading", logger="reader")
            call.log("warning", {"disk": "slow"})
            try:
                result = await call.sample({
                    "messages": [{"role": "user", "content": {"type": "text", "text": "Summarize"}}],
                    "maxTokens": 20,
                })
            except InputUnsupported as e:
                return f"cannot sample: {e.code}"
            return "model said: " + result["content"]["text"]

        @app.tool
        def summarize_plain(call: Call) -> str:
            "Samples from a thread"
            result = call.sample_blocking({"messages": [{"role": "user", "content": {
                "type": "text", "text": "Again"}}], "maxTokens": 5})
            return result["model"]

        self.start(app)
        model = {"role": "assistant", "content": {"type": "text", "text": "short"}, "model": "m1"}
        asker = self.native(sample=lambda params: model)
        asker.rpc("logging/setLevel", {"level": "warning"})
        self.assertEqual(text_of(asker.native("summarize", {})), "model said: short")
        self.assertEqual(asker.sampled[0]["maxTokens"], 20)
        wait_until(lambda: asker.logs, what="a log message")
        self.assertEqual(asker.logs, [{"level": "warning", "data": {"disk": "slow"}}])
        self.assertEqual(text_of(asker.native("summarize_plain", {})), "m1")
        plain = self.native()  # declares no sampling; no level set, so every message passes
        self.assertEqual(text_of(plain.native("summarize", {})), "cannot sample: input_unsupported")
        wait_until(lambda: len(plain.logs) == 2, what="both log messages")
        self.assertEqual(plain.logs[0], {"level": "info", "logger": "reader", "data": "reading"})


class Withdraw(Case):
    def test_a_stopped_app_withdraws_its_groups_and_its_parked_calls_end_at_once(self) -> None:
        # A stream that merely drops keeps the calls parked for its tools for the resume grace
        # (60 s); a deliberate stop withdraws the groups before closing it, so they end at once.
        app = App("busy", home=self.broker.home, max_concurrent=1)
        started = threading.Event()

        @app.tool
        async def work(call: Call, n: int) -> str:
            "Runs until cancelled"
            started.set()
            await call.wait_cancelled()
            return f"stopped {n}"

        self.start(app)
        agent = self.agent()
        running = agent.start_call("work", {"n": 1})
        self.assertTrue(started.wait(20))
        parked = agent.start_call("work", {"n": 2})
        wait_until(lambda: sorted(r["state"] for r in self.broker.pending()) == ["claimed", "parked"],
                   what="one call claimed and one parked")
        began = time.monotonic()
        app.stop(10)
        self.assertEqual(text_of(agent.answer(running)), "stopped 1", "its reply is still posted")
        ended = agent.answer(parked, timeout=10)
        self.assertTrue(ended["isError"], ended)
        self.assertIn('cancelled: tool "work" was withdrawn', text_of(ended))
        self.assertLess(time.monotonic() - began, 10)


class Stop(unittest.TestCase):
    def test_stopping_the_app_and_the_broker_at_once_stops_the_app_every_time(self) -> None:
        # As `kill APP BROKER` does (a service manager at shutdown): the app's SIGTERM lands
        # while the broker closes its stream. A stop request is never lost, however the two
        # interleave; twenty tries, as a lost one showed about once in eight.
        broker = Broker()
        self.addCleanup(broker.close)
        example = ROOT / "sdks" / "python" / "examples" / "text_tools.py"
        env = {**os.environ, "LEO_HOME": broker.home, "PYTHONPATH": str(ROOT / "sdks" / "python" / "src")}
        for attempt in range(20):
            app = subprocess.Popen(
                [sys.executable, "-W", "ignore::ResourceWarning", str(example)], env=env,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                text=True,
            )
            self.addCleanup(app.kill)
            wait_until(lambda: broker.tools() == ["reverse_text", "word_count"], what="the app serving")
            os.kill(app.pid, signal.SIGTERM)
            os.kill(broker.proc.pid, signal.SIGTERM)
            try:
                _, err = app.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                app.kill()
                _, err = app.communicate()
                self.fail(f"try {attempt + 1}: the app did not stop on SIGTERM:\n{err}")
            self.assertEqual(app.returncode, 0, f"try {attempt + 1}:\n{err}")
            broker.restart()  # kills what is left of the one stopping (its drain takes 2 s)

    def example(self, broker: Broker) -> subprocess.Popen[str]:
        env = {**os.environ, "LEO_HOME": broker.home, "PYTHONPATH": str(ROOT / "sdks" / "python" / "src")}
        app = subprocess.Popen(
            [sys.executable, "-W", "ignore::ResourceWarning", str(ROOT / "sdks" / "python" / "examples" / "text_tools.py")],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        self.addCleanup(app.kill)
        return app

    def stops_within(self, app: subprocess.Popen[str], seconds: float, what: str) -> None:
        os.kill(app.pid, signal.SIGTERM)
        try:
            _, err = app.communicate(timeout=seconds)
        except subprocess.TimeoutExpired:
            app.kill()
            _, err = app.communicate()
            self.fail(f"{what}: the app was still running {seconds} s after SIGTERM:\n{err}")
        self.assertEqual(app.returncode, 0, f"{what}:\n{err}")

    def test_a_stopped_app_exits_at_once_while_the_broker_stays_up(self) -> None:
        # Nothing the SDK holds (a timer, a pooled keep-alive connection, a worker thread) may
        # keep a stopped app running; the broker staying up would hold any of them open.
        broker = Broker()
        self.addCleanup(broker.close)
        for attempt in range(3):
            app = self.example(broker)
            wait_until(lambda: broker.tools() == ["reverse_text", "word_count"], what="the app serving")
            self.stops_within(app, 5, f"try {attempt + 1}")

    def test_a_stop_ends_an_open_the_broker_does_not_answer(self) -> None:
        # A broker that accepts a connection but does not answer (frozen here; shutting down,
        # in life): the stop ends the open of the event stream, not its timeout.
        broker = Broker()
        self.addCleanup(broker.close)
        app = App("frozen", home=broker.home)

        @app.tool
        def noop() -> str:
            """Does nothing"""
            return "ok"

        broker.proc.send_signal(signal.SIGSTOP)
        self.addCleanup(broker.proc.send_signal, signal.SIGCONT)
        app.start()
        self.assertTrue(app.wait_status("connecting"))
        time.sleep(0.5)  # the connect succeeds (the kernel queues it); the request waits
        began = time.monotonic()
        app.stop(timeout=5)
        self.assertEqual(app.status, "stopped", f"still {app.status} {time.monotonic() - began:.1f} s after the stop")


class PendingRule(unittest.TestCase):
    def test_the_pending_list_offers_parked_calls_anew_and_runs_ours_without_claiming(self) -> None:
        # The rule shared by the reconnect and the read after a claim without a definite answer.
        from leo_app._calls import Calls

        def req(rid: str, state: str, by: str | None = None, tool: str = "t") -> dict[str, Any]:
            r: dict[str, Any] = {"id": rid, "group": "g", "tool": tool, "state": state}
            if by is not None:
                r["claimed_by"] = by
            return r

        def serves(r: dict[str, Any]) -> bool:
            return r["group"] == "g" and r["tool"] == "t"

        calls = Calls(8)
        # Seen and finished here: not offered again, even listed as ours.
        self.assertTrue(calls.offer(req("done", "parked")))
        started = calls.next_to_start()
        assert started is not None
        calls.finished(started[0]["id"])
        # Its claim got no definite answer: forgotten, so the list may offer it again.
        self.assertTrue(calls.offer(req("lost", "parked")))
        calls.next_to_start()
        calls.forget("lost")
        calls.finished("lost")
        listed = [
            req("parked", "parked"), req("lost", "claimed", "me"), req("done", "claimed", "me"),
            req("theirs", "claimed", "other"), req("other_tool", "parked", tool="x"),
        ]
        self.assertTrue(calls.offer_listed(listed, "me", serves))
        first, second = calls.next_to_start(), calls.next_to_start()
        assert first is not None and second is not None
        self.assertEqual((first[0]["id"], first[2]), ("lost", True))
        self.assertEqual((second[0]["id"], second[2]), ("parked", False))
        self.assertIsNone(calls.next_to_start())
        # Read again, the same list adds nothing: both run here now.
        self.assertFalse(calls.offer_listed(listed, "me", serves))


class Codes(unittest.TestCase):
    def test_the_sdk_reads_refusals_by_the_shared_table(self) -> None:
        # testdata/sdk/codes.json is the protocol's table (its tests check it); this SDK's
        # copy must be the same.
        table = json.loads((ROOT / "testdata" / "sdk" / "codes.json").read_text())
        self.assertEqual(sorted(_codes.FATAL), table["fatal"])
        self.assertEqual(sorted(_codes.LOST_RACE), table["lost_race"])
        self.assertEqual(sorted(_codes.REGISTER_AGAIN), table["register_again"])
        self.assertEqual(_codes.RESUME_REFUSED, table["resume_refused"])


class Settings(unittest.TestCase):
    def test_bad_settings_fail_early(self) -> None:
        with self.assertRaises(ValueError):
            App("g", agents=[])
        with self.assertRaises(ValueError):
            App("g", agents={"g": "ci-*"})
        with self.assertRaises(ValueError):
            App("g", url="ftp://x:1")
        with self.assertRaises(ValueError):
            App("g", url="http://x:1", ca_file="/nowhere/ca.pem")
        with self.assertRaises(ValueError):
            App("g", url="https://x:1", ca_file="/nowhere/ca.pem")
        with self.assertRaises(ValueError):
            App("g", url="http://127.0.0.1")
        with self.assertRaises(ValueError):
            App("g", token="a", device="b")
        app = App("g")
        with self.assertRaises(ValueError):

            @app.tool
            def nodoc() -> str:
                return ""

    def test_a_refused_group_ends_the_app(self) -> None:
        broker = Broker()
        self.addCleanup(broker.close)
        app = App("g", home=broker.home)

        @app.tool(name="leo_reserved")
        def t() -> str:
            "Reserved name"
            return ""

        app.start()
        from leo_app import FatalError

        with self.assertRaises(FatalError) as e:
            app.wait_serving()
        self.assertIn("invalid_tool", str(e.exception))
        app._thread = None


def load_tests(
    loader: unittest.TestLoader, tests: unittest.TestSuite, pattern: str | None
) -> unittest.TestSuite:
    """With `LEO_TEST_SHARD=I/N`, only the I-th of N shards of the test classes (by name,
    dealt round-robin): the suite mostly waits on brokers, so its runner starts N at once."""
    shard = os.environ.get("LEO_TEST_SHARD")
    if not shard:
        return tests

    def cases(suite: unittest.TestSuite) -> list[unittest.TestCase]:
        found: list[unittest.TestCase] = []
        for t in suite:
            found.extend(cases(t) if isinstance(t, unittest.TestSuite) else [t])
        return found

    index, count = (int(part) for part in shard.split("/"))
    every = cases(tests)
    names = sorted({type(t).__name__ for t in every})
    mine = set(names[index::count])
    return unittest.TestSuite(t for t in every if type(t).__name__ in mine)


if __name__ == "__main__":
    unittest.main()
