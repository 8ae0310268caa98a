"""The bench's app in plain Python, without the SDK: `http.client` on the broker's TCP
listener (`LEO_URL`, the operator token from `$LEO_HOME/state/operator.token`), one provider
event stream, and for every call a claim then a result, two POSTs on a keep-alive connection,
as an app written from the protocol reference alone does. It serves the bench's tools as
group `bench` with the payload of the tool called, serialized once ahead (the same bytes as
the Rust app). Tools come from the JSON file the bench writes:
`[{name, description, input_schema, content}]`. Prints `serving` once registered."""

import http.client
import json
import os
import queue
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit

WORKERS = 8

url = urlsplit(os.environ["LEO_URL"])
token = (Path(os.environ["LEO_HOME"]) / "state" / "operator.token").read_text().strip()
headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
tools = json.loads(Path(sys.argv[1]).read_text())
content = {t["name"]: json.dumps(t["content"], separators=(",", ":")) for t in tools}


def connect():
    return http.client.HTTPConnection(url.hostname, url.port)


def post(conn, path, body):
    conn.request("POST", path, body=body, headers=headers)
    resp = conn.getresponse()
    data = resp.read()
    if resp.status != 200:
        raise RuntimeError(f"POST {path}: {resp.status} {data[:200]!r}")
    return data


def events(conn):
    """(event, data) of the provider stream, one at a time."""
    conn.request("GET", "/api/v1/events?client_tools=1&name=bench-plain", headers=headers)
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"events: {resp.status}")
    event, data = None, []
    while True:
        line = resp.readline()
        if not line:
            return
        line = line.rstrip(b"\r\n")
        if not line:
            if event is not None:
                yield event, b"\n".join(data)
            event, data = None, []
        elif line.startswith(b"event:"):
            event = line[6:].strip().decode()
        elif line.startswith(b"data:"):
            data.append(line[5:].lstrip())


def worker(client_id, calls):
    conn = connect()
    claim = json.dumps({"client_id": client_id}).encode()
    while True:
        request = calls.get()
        base = f"/api/v1/client-tools/requests/{request['id']}"
        result = '{"client_id":%s,"ok":true,"content":%s}' % (
            json.dumps(client_id), content[request["tool"]])
        try:
            conn = send(conn, base + "/claim", claim)
            conn = send(conn, base + "/result", result.encode())
        except Exception as e:  # noqa: BLE001 - one call's failure must not end the worker
            print(f"call {request['id']}: {e}", file=sys.stderr, flush=True)


def send(conn, path, body):
    """POSTs on the kept-alive `conn`; a connection the broker closed while it was idle (its
    keep-alive timeout, between the bench's runs) is opened again and the request sent once
    more: the request never reached the broker. Returns the connection to use next."""
    try:
        post(conn, path, body)
        return conn
    except (http.client.RemoteDisconnected, ConnectionError):
        conn.close()
        conn = connect()
        post(conn, path, body)
        return conn


def main():
    stream = events(connect())
    event, data = next(stream)
    assert event == "hello", event
    client_id = json.loads(data)["client_id"]
    definitions = [
        {"name": t["name"], "description": t["description"], "input_schema": t["input_schema"]}
        for t in tools
    ]
    post(connect(), "/api/v1/client-tools", json.dumps(
        {"client_id": client_id, "group": "bench", "tools": definitions}).encode())
    calls = queue.Queue()
    for _ in range(WORKERS):
        threading.Thread(target=worker, args=(client_id, calls), daemon=True).start()
    print("serving", flush=True)
    threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
    for event, data in stream:
        if event == "client_tool.request":
            calls.put(json.loads(data))


main()
