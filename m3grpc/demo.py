"""`m3grpc demo`: run an execution that pauses for managed input, answer it, show the result.

It uses the bundled example server (examples/shipping_server.py) over stdio
and an SQLite store in a temporary directory.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from m3grpc import ElicitationResponse, MCPTestKit, StdioServer
from m3grpc.storage import SQLiteExecutionStore
from m3grpc.types import ExecutionStatus

EXAMPLE_SERVER = Path(__file__).resolve().parents[1] / "examples" / "shipping_server.py"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo; it takes no arguments."""
    # The example server elicits mid-call (`ctx.elicit`), which needs the
    # legacy (2025-11-25) protocol generation's server-to-client requests.
    shipping_server = StdioServer(
        name="shipping", command=sys.executable, args=(str(EXAMPLE_SERVER),), protocol="legacy"
    )
    with tempfile.TemporaryDirectory(prefix="m3-demo-") as directory:
        store = SQLiteExecutionStore(Path(directory) / "executions.sqlite")
        try:
            with MCPTestKit(store=store, env={}) as kit:
                agent = kit.agents([{"harness": "scripted", "models": []}])[0]
                handle = agent.submit(
                    "Ask for the delivery address, then book the shipment.",
                    server=shipping_server,
                    tools=["shipping:book_shipment"],
                    human_input="managed",
                )
                print(f"submitted execution {handle.execution_id}")
                deadline = time.monotonic() + 60
                pending = handle.pending_elicitation()
                while pending is None and time.monotonic() < deadline:
                    if handle.snapshot().lifecycle is ExecutionStatus.FINISHED:
                        print(f"finished before asking: {handle.result(timeout=1)}")
                        return 1
                    time.sleep(0.1)
                    pending = handle.pending_elicitation()
                if pending is None:
                    print("the execution did not ask for input within 60 s")
                    return 1
                print(f"pending round {pending.round_id}: {list(pending.requests)}")
                print(f"  lifecycle: {handle.snapshot().lifecycle.value}")
                handle.respond_elicitation(
                    pending.round_id,
                    {
                        "shipping_address": ElicitationResponse(
                            action="accept",
                            content={"street": "1 Main Street", "city": "Pune"},
                        )
                    },
                    idempotency_key=f"address-{pending.round_id}",
                )
                result = handle.result(timeout=60)
                print(f"outcome: {result.outcome.value}")
                for operation in result.operations:
                    content = (operation.result or {}).get("content") or [{}]
                    print(f"  {operation.operation_name}: {content[0].get('text')}")
                return 0 if result.outcome.value == "succeeded" else 1
        finally:
            store.close()


if __name__ == "__main__":
    raise SystemExit(main())
