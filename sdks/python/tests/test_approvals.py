"""The Python SDK as an approver, against the real broker and the real leo-mcp: a paired
device's `Approver` receives the calls that need approval (asked before it connected, and
after), approves one as asked, one with edited arguments and denies one with a reason; the
agent gets each outcome; a stale digest and a second decision are typed errors."""

from __future__ import annotations

import asyncio
import os
import queue
import subprocess
import sys
import tempfile
import threading
import unittest
from collections.abc import AsyncIterator
from pathlib import Path

from support import HERE, LEO, NATIVE, WAIT, Broker, McpAgent, text_of

from leo_app import (
    AlreadyDecided,
    App,
    ApprovalRequest,
    Approver,
    DigestMismatch,
    ToolError,
)

CONFIG = """approvals:
  allow_edits: true
  approvers:
    devices: [phone]
"""


class Approving(unittest.TestCase):
    def setUp(self) -> None:
        home = tempfile.mkdtemp(prefix="leo-py-")
        # The phone is paired before the broker starts, as an operator sets it up once.
        env = {**os.environ, "LEO_HOME": home}
        subprocess.run([LEO, "device", "pair", "phone"], env=env, check=True, capture_output=True)
        self.broker = Broker(CONFIG, home=home)
        self.addCleanup(self.broker.close)
        app = App("ops", home=home)

        @app.tool(needs_approval=True)
        def deploy(env: str) -> str:
            "Deploys"
            if env == "prod-eu":
                raise ToolError("not_allowed", "never")
            return f"deployed {env}"

        app.start()
        self.addCleanup(app.stop, 10)
        app.wait_serving()
        self.agent = McpAgent(self.broker, agent="ci-7", client=NATIVE)
        self.addCleanup(self.agent.close)

    def test_an_approver_app_approves_edits_and_denies_and_gets_typed_refusals(self) -> None:
        agent = self.agent
        # Asked before the approver connects: it is listed to it all the same.
        first = agent.start_native("deploy", {"env": "prod"})

        async def scenario() -> None:
            approver = Approver(home=self.broker.home, device="phone")
            requests = approver.requests()
            try:
                await self.decide_all(agent, approver, requests, first)
            finally:
                await requests.aclose()
                approver.close()

        asyncio.run(asyncio.wait_for(scenario(), 3 * WAIT))

    async def decide_all(
        self, agent: McpAgent, approver: Approver, requests: AsyncIterator[ApprovalRequest],
        first: int,
    ) -> None:
        async def next_request() -> ApprovalRequest:
            return await asyncio.wait_for(anext(requests), WAIT)

        async def answer(rid: int) -> dict:
            return await asyncio.to_thread(agent.answer, rid)

        asked = await next_request()
        self.assertEqual((asked.agent, asked.tool, asked.arguments), ("ci-7", "deploy", {"env": "prod"}))
        self.assertEqual((asked.required_by, asked.editable), ("tool", True))
        self.assertTrue(asked.digest.startswith("sha256:"), asked.digest)
        self.assertFalse(await asked.approve())
        self.assertEqual(text_of(await answer(first)), "deployed prod")
        # Decided already: a second decision is refused, typed.
        with self.assertRaises(AlreadyDecided) as refused:
            await asked.deny("too late")
        self.assertEqual((refused.exception.status, refused.exception.code), (409, "already_decided"))

        # Asked while the approver listens: approved with other arguments.
        second = agent.start_native("deploy", {"env": "prod"})
        asked = await next_request()
        stale = ApprovalRequest.of({**_body(asked), "digest": "sha256:" + "0" * 64}, approver)
        with self.assertRaises(DigestMismatch) as mismatch:
            await stale.approve()
        self.assertEqual(mismatch.exception.status, 409)
        self.assertTrue(await asked.approve(arguments={"env": "staging"}))
        edited = text_of(await answer(second))
        self.assertIn("changed the arguments", edited)
        self.assertIn("deployed staging", edited)

        # Denied with a reason: the agent gets it as the tool's error.
        third = agent.start_native("deploy", {"env": "prod"})
        asked = await next_request()
        await asked.deny("not on a Friday")
        denied = await answer(third)
        self.assertTrue(denied.get("isError"), denied)
        self.assertEqual(text_of(denied), "denied: not on a Friday")
        self.assertEqual(await approver.pending(), [])

    def test_the_phone_approver_example_decides_as_the_person_answers(self) -> None:
        # The example of docs/approvals.md, run as a person runs it on a phone: over TCP with
        # the phone's token, answered on its standard input.
        token = Path(self.broker.home, "state", "devices", "phone.token").read_text().strip()
        env = {
            **os.environ, "LEO_URL": f"http://{self.broker.addr}", "LEO_TOKEN": token,
            "PYTHONPATH": str(HERE.parent / "src"), "PYTHONUNBUFFERED": "1",
        }
        phone = subprocess.Popen(
            [sys.executable, str(HERE.parent / "examples" / "phone_approver.py")], env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        self.addCleanup(phone.kill)
        lines: queue.Queue[str] = queue.Queue()

        def read() -> None:
            assert phone.stdout is not None
            for line in phone.stdout:
                lines.put(line)

        threading.Thread(target=read, daemon=True).start()

        def shown() -> str:
            while True:
                line = lines.get(timeout=WAIT)
                if "calls deploy" in line:
                    return line

        def say(text: str) -> None:
            assert phone.stdin is not None
            phone.stdin.write(text)
            phone.stdin.flush()

        agent = self.agent
        first = agent.start_native("deploy", {"env": "prod"})
        self.assertIn('ci-7 calls deploy {"env": "prod"}', shown())
        say("a\n")
        self.assertEqual(text_of(agent.answer(first)), "deployed prod")

        second = agent.start_native("deploy", {"env": "\x1b[31mprod"})
        line = shown()
        self.assertIn("\\u001b[31mprod", line)
        self.assertNotIn("\x1b", line)
        say("e\n" '{"env": "staging"}\n')
        self.assertIn("deployed staging", text_of(agent.answer(second)))

        third = agent.start_native("deploy", {"env": "prod"})
        shown()
        say("d\nnot on a Friday\n")
        self.assertEqual(text_of(agent.answer(third)), "denied: not on a Friday")


def _body(r: ApprovalRequest) -> dict:
    return {
        "id": r.id, "agent": r.agent, "session": r.session, "group": r.group, "tool": r.tool,
        "arguments": r.arguments, "digest": r.digest, "editable": r.editable,
        "required_by": r.required_by, "requested_at": r.requested_at, "expires_at": r.expires_at,
    }


if __name__ == "__main__":
    unittest.main()
