"""The app side of the feature measurement (measure.sh): registers record (title, annotations,
output_schema), deploy, confirm, image, slow and quiet on the broker at 127.0.0.1:$LEO_PORT, and
serves each call: record answers a text block and structured_content that differ, deploy
reports progress twice, confirm asks the user (POST .../input), image answers a 1x1 PNG and a
text block, slow reports progress every second for $FEATURES_SLOW_S seconds (default 8) before
answering, quiet waits as long without a word (the harness's tool timeout is set shorter than
that, so the pair shows whether progress resets it). Every HTTP answer and event goes to
$FEATURES_LOG. Standard library only."""
import http.client, json, os, sys, threading, time
TOKEN = open(os.environ["LEO_HOME"] + "/state/operator.token").read().strip()
PORT = int(os.environ.get("LEO_PORT", "8371"))
LOG = open(os.environ["FEATURES_LOG"], "a")
def log(**kw):
    LOG.write(json.dumps({"t": time.time(), **kw}) + "\n"); LOG.flush()
def post(path, body):
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=600)
    c.request("POST", path, json.dumps(body), {"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json"})
    r = c.getresponse(); data = json.loads(r.read()); log(path=path, status=r.status, reply=data); return data
c = http.client.HTTPConnection("127.0.0.1", PORT)
c.request("GET", "/api/v1/events?client_tools=1", headers={"Authorization": "Bearer " + TOKEN})
r = c.getresponse()
def events():
    ev = {}
    for raw in r:
        line = raw.decode().rstrip("\n")
        if line == "":
            if ev: yield ev
            ev = {}
        elif line.startswith("event:"): ev["event"] = line[6:].strip()
        elif line.startswith("data:"): ev["data"] = json.loads(line[5:].strip())
it = events()
hello = next(it); cid = hello["data"]["client_id"]
obj = lambda props, req: {"type": "object", "properties": props, "required": req}
post("/api/v1/client-tools", {"client_id": cid, "group": "m", "tools": [
  {"name": "record", "description": "Return the build record", "input_schema": {"type": "object"}, "title": "Build record",
   "annotations": {"readOnlyHint": True}, "output_schema": obj({"build": {"type": "integer"}, "url": {"type": "string"}}, ["build", "url"])},
  {"name": "deploy", "description": "Deploy; reports progress", "input_schema": {"type": "object"}},
  {"name": "confirm", "description": "Asks the user", "input_schema": {"type": "object"}},
  {"name": "image", "description": "Returns a picture", "input_schema": {"type": "object"}},
  {"name": "slow", "description": "Takes a while, reports progress", "input_schema": {"type": "object"}},
  {"name": "quiet", "description": "Takes a while, says nothing", "input_schema": {"type": "object"}}]})
SLOW_S = int(os.environ.get("FEATURES_SLOW_S", "8"))
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
def serve(req):
    rid = req["id"]; tool = req["tool"]; base = f"/api/v1/client-tools/requests/{rid}"
    post(base + "/claim", {"client_id": cid})
    if tool == "record":
        post(base + "/result", {"client_id": cid, "ok": True, "content": [{"type": "text", "text": "record 7 (summary block)"}], "structured_content": {"build": 7, "url": "https://ci.example/7"}})
    elif tool == "deploy":
        for n in (1, 2):
            post(base + "/progress", {"client_id": cid, "progress": n, "total": 3, "message": f"step {n}"}); time.sleep(1)
        post(base + "/result", {"client_id": cid, "ok": True, "content": [{"type": "text", "text": "deployed"}]})
    elif tool == "image":
        post(base + "/result", {"client_id": cid, "ok": True, "content": [{"type": "image", "data": PNG, "mimeType": "image/png"}, {"type": "text", "text": "image: the block before this one is a 1x1 PNG"}]})
    elif tool == "slow":
        for n in range(1, SLOW_S + 1):
            time.sleep(1); post(base + "/progress", {"client_id": cid, "progress": n, "total": SLOW_S + 1, "message": f"second {n}"})
        post(base + "/result", {"client_id": cid, "ok": True, "content": [{"type": "text", "text": f"slow: done after {SLOW_S} s of progress"}]})
    elif tool == "quiet":
        time.sleep(SLOW_S)
        post(base + "/result", {"client_id": cid, "ok": True, "content": [{"type": "text", "text": f"quiet: done after {SLOW_S} s without progress"}]})
    else:
        ans = post(base + "/input", {"client_id": cid, "message": "Deploy now?", "requested_schema": obj({"confirm": {"type": "boolean"}}, ["confirm"])})
        post(base + "/result", {"client_id": cid, "ok": True, "content": [{"type": "text", "text": "answer: " + json.dumps(ans)}]})
for ev in it:
    log(event=ev.get("event"), data=ev.get("data"))
    if ev.get("event") == "client_tool.request":
        threading.Thread(target=serve, args=(ev["data"],), daemon=True).start()
