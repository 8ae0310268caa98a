"""A complete app: the group `text` with two tools, served until Ctrl-C.

    pip install ./sdks/python
    leo broker &                      # in another terminal, or already running
    python3 sdks/python/examples/text_tools.py
    leo call reverse_text '{"text": "stressed"}'    # desserts
"""

from leo_app import App, Call

app = App("text", max_concurrent=8)


@app.tool(answers_at_once=True, timeout_s=30)
def reverse_text(text: str) -> str:
    """Reverse a text, character by character"""
    return text[::-1]


@app.tool(timeout_s=30)
async def word_count(call: Call, text: str) -> dict[str, int]:
    """Count the words, lines and characters of a text"""
    call.check()  # raises Cancelled if the agent already gave up
    return {"words": len(text.split()), "lines": len(text.splitlines()), "chars": len(text)}


if __name__ == "__main__":
    app.run()
