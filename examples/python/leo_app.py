#!/usr/bin/env python3
"""A Leo app in one file: it offers two text tools to AI agents, through the Python SDK.

The SDK (`sdks/python`, package `leo-app`, standard library only) talks to the broker over
$LEO_HOME/run/leo.sock with the operator token, opens the provider event stream as
"leo_app.py", registers the group "text" and answers that group's calls (other apps' calls are
theirs). When the stream drops it reconnects with backoff, registers again and answers what is
still pending. Each time it serves, this prints `serving TOOLS as CLIENT_ID`."""
import logging
import os
import sys
import threading

try:
    from leo_app import App
except ImportError:  # run from a checkout without `pip install ./sdks/python`
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "..", "sdks", "python", "src"))
    from leo_app import App

logging.basicConfig(format="leo_app: %(message)s", level=logging.INFO)  # to stderr
app = App("text", name="leo_app.py")  # the name `leo status` and the console show


@app.tool(timeout_s=30)
def reverse_text(text: str) -> str:
    """Reverse a text, character by character"""
    return text[::-1]


@app.tool(timeout_s=30)
def word_count(text: str) -> str:
    """Count the words, lines and characters of a text"""
    return f"{len(text.split())} words, {len(text.splitlines())} lines, {len(text)} characters"


def announce() -> None:
    """Prints a line each time the app serves (again, after an outage, as the same client when
    it resumed in time)."""
    while True:
        app.wait_status("serving", timeout=None)
        print(f"serving {', '.join(app.tools)} as {app.client_id}", flush=True)
        app.wait_status("serving", timeout=None, not_=True)


if __name__ == "__main__":
    threading.Thread(target=announce, daemon=True).start()
    app.run()
