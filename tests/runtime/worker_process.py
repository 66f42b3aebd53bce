"""A worker process for the recovery test: it submits a managed execution, prints
the pending round as JSON, then waits (bounded) until the test SIGKILLs it."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from m3grpc import MCPTestKit, StdioServer
from m3grpc.storage import SQLiteExecutionStore


def main() -> None:
    database, pid_file = sys.argv[1], sys.argv[2]
    server = StdioServer(
        name="shipping",
        command=sys.executable,
        args=(
            str(Path(__file__).parents[1] / "mcp_servers" / "shipping.py"),
            "--pid-file",
            pid_file,
        ),
    )
    store = SQLiteExecutionStore(database)
    with MCPTestKit(store=store, lease_seconds=1.0, poll_interval=0.1) as kit:
        agent = kit.agents([{"harness": "scripted", "models": []}])[0]
        handle = agent.submit(
            "Book it.", server=server, tools=["shipping:book_shipment"], human_input="managed"
        )
        for _ in range(1200):
            pending = handle.pending_elicitation()
            if pending is not None:
                print(
                    json.dumps({"execution_id": handle.execution_id, "round_id": pending.round_id}),
                    flush=True,
                )
                break
            time.sleep(0.05)
        time.sleep(120)  # the test kills this process long before


if __name__ == "__main__":
    main()
