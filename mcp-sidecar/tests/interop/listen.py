"""The 2026-07-28 tool-list change, as the SDK scripts wait for it: a subscriptions/listen
stream, a {"step": ready} line, a line on stdin once the test has added the tool, then the
first re-listing that names it, said as {"step": "changed", "tools": [...]}."""

import json
import sys

import anyio


def names(listed):
    return sorted(t.name for t in listed.tools)


async def until_listed(client, ready, tool="later"):
    async with client.listen(tools_list_changed=True) as sub:
        print(json.dumps({"step": ready}), flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)
        with anyio.fail_after(20):
            async for _event in sub:
                listed = await client.list_tools(cache_mode="refresh")
                if tool in names(listed):
                    print(json.dumps({"step": "changed", "tools": names(listed)}), flush=True)
                    return
