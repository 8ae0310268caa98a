#!/usr/bin/env python3
"""A Leo app in one file, Python standard library only: it offers two text tools to AI agents.

It talks to the Leo broker over $LEO_HOME/run/leo.sock with the operator token, opens the
provider event stream as "leo_app.py", registers the group "text", then claims and answers the
calls of that group (every provider stream sees every call; other apps' calls are theirs). When
the stream drops it reconnects with backoff, registers again and answers what is still pending."""
import http.client
import json
import logging
import os
import socket
import time

HOME = os.environ.get("LEO_HOME") or os.path.expanduser("~/.leo")
SOCKET = os.path.join(HOME, "run", "leo.sock")
# A paired device's token (`leo device pair NAME`) works as well as the operator's.
TOKEN_FILE = os.environ.get("LEO_TOKEN_FILE") or os.path.join(HOME, "state", "operator.token")

TEXT_ARG = {"type": "object", "required": ["text"],
            "properties": {"text": {"type": "string", "description": "The text to work on"}}}
NAME, GROUP = "leo_app.py", "text"  # the name `leo status` shows; letters and ._- need no quoting
TOOLS = [
    {"name": "reverse_text", "description": "Reverse a text, character by character",
     "input_schema": TEXT_ARG, "timeout_s": 30},
    {"name": "word_count", "description": "Count the words, lines and characters of a text",
     "input_schema": TEXT_ARG, "timeout_s": 30},
]
# What each tool does with its arguments (already checked against input_schema by the broker).
HANDLERS = {
    "reverse_text": lambda args: args["text"][::-1],
    "word_count": lambda args: f"{len(args['text'].split())} words, "
    f"{len(args['text'].splitlines())} lines, {len(args['text'])} characters",
}
logging.basicConfig(format="leo_app: %(message)s", level=logging.INFO)  # to stderr


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client over an AF_UNIX socket; "localhost" is only what goes in the Host header."""

    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.socket_path)


def headers():
    with open(TOKEN_FILE) as f:  # read each time: the broker creates it at its first start
        return {"Authorization": f"Bearer {f.read().strip()}", "Content-Type": "application/json"}


def api(method, path, body=None):
    """One request on its own connection: the `data` of the answer, or RuntimeError."""
    conn = UnixHTTPConnection(SOCKET, timeout=10)
    try:
        conn.request(method, path, None if body is None else json.dumps(body), headers())
        reply = json.loads(conn.getresponse().read())
    finally:
        conn.close()
    if not reply.get("ok"):
        raise RuntimeError(f"{method} {path}: {reply.get('code')}: {reply.get('error')}")
    return reply["data"]


def events(conn):
    """Yields (event, data) from the provider stream until the broker closes it."""
    conn.request("GET", f"/api/v1/events?client_tools=1&name={NAME}", headers=headers())
    response = conn.getresponse()
    if response.status != 200:
        raise RuntimeError(f"event stream: {response.status} {response.read()[:200]!r}")
    event, data = None, []
    while line := response.readline():
        line = line.decode().rstrip("\r\n")
        if not line:  # a blank line ends an event
            if event and data:
                yield event, json.loads("\n".join(data))
            event, data = None, []
        elif not line.startswith(":"):  # ":" lines are keep-alives
            field, _, value = line.partition(":")
            if field == "event":
                event = value.strip()
            elif field == "data":
                data.append(value.removeprefix(" "))


def answer(request, client_id):
    """Claims one call and posts its result; a failing tool becomes the app's own error."""
    path = f"/api/v1/client-tools/requests/{request['id']}"
    try:
        api("POST", f"{path}/claim", {"client_id": client_id})
    except RuntimeError as e:  # another device took it, or it ended meanwhile
        logging.info(f"not claimed: {e}")
        return
    try:
        text = HANDLERS[request["tool"]](request["arguments"])
        result = {"ok": True, "content": [{"type": "text", "text": text}]}
    except Exception as e:  # report, do not crash: the agent gets "<code>: <message>"
        result = {"ok": False, "error": {"code": "tool_failed", "message": str(e)}}
    api("POST", f"{path}/result", {"client_id": client_id, **result})
    logging.info(f"answered {request['tool']} for {request['agent']}")


def serve(on_ready):
    """One connection's life: hello, register, answer calls until the stream ends."""
    conn = UnixHTTPConnection(SOCKET, timeout=60)  # the broker sends a keep-alive every 15 s
    try:
        client_id = None
        for event, data in events(conn):
            if event == "hello":
                client_id = data["client_id"]
                api("POST", "/api/v1/client-tools",
                    {"client_id": client_id, "group": GROUP, "tools": TOOLS})
                # Calls parked while we were away are not replayed as events: ask for them.
                for request in api("GET", "/api/v1/client-tools/requests?pending=1"):
                    if request["group"] == GROUP and request["state"] == "parked":
                        answer(request, client_id)
                on_ready(client_id)
            elif event == "client_tool.request" and client_id and data["group"] == GROUP:
                answer(data, client_id)
    finally:
        conn.close()


def main():
    delay = 0.25
    while True:
        def ready(client_id):
            nonlocal delay
            delay = 0.25  # connected: the next outage starts its backoff afresh
            print(f"serving {', '.join(t['name'] for t in TOOLS)} as {client_id}", flush=True)
        try:
            serve(ready)
            reason = "the broker closed the stream"
        except (OSError, http.client.HTTPException, RuntimeError, ValueError, KeyError) as e:
            reason = f"{type(e).__name__}: {e}"
        logging.info(f"disconnected ({reason}); retrying in {delay:g} s")
        time.sleep(delay)
        delay = min(delay * 2, 5.0)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
