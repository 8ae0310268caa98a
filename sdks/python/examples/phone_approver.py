"""An approver on a phone (a terminal app on it): each call that needs approval is shown,
and the person at the phone approves it, edits its arguments, or denies it.

    leo device pair phone             # on the broker's host; config.yaml names the approver:
                                      # approvals: {approvers: {devices: [phone]}}
    LEO_URL=https://leo.internal:8370 LEO_TOKEN=<the phone's token> \\
        LEO_CA_FILE=ca.pem python3 phone_approver.py
"""

import asyncio
import json
import os

from leo_app import AlreadyDecided, Approver


async def ask(question: str) -> str:
    return (await asyncio.to_thread(input, question)).strip()


async def main() -> None:
    approver = Approver(url=os.environ["LEO_URL"], token=os.environ["LEO_TOKEN"])
    async for call in approver.requests():
        # json.dumps escapes every control character: an agent chose these arguments.
        print(f"{call.agent} calls {call.tool} {json.dumps(call.arguments)}")
        print(f"  asked {call.requested_at}, expires {call.expires_at}")
        choices = "[a]pprove, [e]dit, [d]eny" if call.editable else "[a]pprove, [d]eny"
        answer = await ask(f"{choices}? ")
        try:
            if answer == "a":
                await call.approve()
            elif answer == "e" and call.editable:
                await call.approve(arguments=json.loads(await ask("arguments (JSON): ")))
            else:
                await call.deny(await ask("reason: ") or None)
        except AlreadyDecided:
            print("  someone else decided it first")


if __name__ == "__main__":
    asyncio.run(main())
