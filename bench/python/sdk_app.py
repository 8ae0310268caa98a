"""The bench's app on the Python SDK (`sdks/python`, standard library only): it serves the
bench's tools as group `bench` and answers every call at once (`answers_at_once`, one POST per
call) with the payload of the tool called, serialized once ahead (`Reply.raw_content`), the
same bytes as the Rust app. Tools come from the JSON file the bench writes:
`[{name, description, input_schema, content}]`. Prints `serving` once registered."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sdks" / "python" / "src"))

from leo_app import App, Call, Reply  # noqa: E402


def answer(raw: bytes):
    reply = Reply.raw_content(raw)

    def handler(call: Call) -> Reply:
        return reply

    return handler


app = App("bench", max_concurrent=256)
for t in json.loads(Path(sys.argv[1]).read_text()):
    handler = answer(json.dumps(t["content"], separators=(",", ":")).encode())
    app.tool(
        handler, name=t["name"], description=t["description"], schema=t["input_schema"],
        answers_at_once=True,
    )

app.start()
app.wait_serving(30)
print("serving", flush=True)
try:
    sys.stdin.read()  # the bench closes stdin (or kills us) to stop
finally:
    app.stop(5)
