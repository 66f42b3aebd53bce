"""The product documentation's first program, verbatim apart from the import path and binding.

tests/harness/test_codex.py runs this file as a script with M3_DOCS_CODEX_MODEL
naming the fake model (m3grpc.devtools.fake_model) and M3_CODEX_* pointing the
codex harness at it. Between the markers below is the documented program: only
`m3` -> `m3grpc` in the imports and the `shipping_server = binding()` line (the
documentation leaves the binding to the application) differ from it. After the
program, the script prints what the test checks as one JSON line.
"""

# ruff: noqa: E402  (the documented program has its imports where it has them)

import json
import sys
from pathlib import Path

from m3grpc import StdioServer

EXAMPLE_SERVER = Path(__file__).resolve().parents[2] / "examples" / "shipping_server.py"


def binding() -> StdioServer:
    return StdioServer(
        name="shipping", command=sys.executable, args=[str(EXAMPLE_SERVER)], protocol="legacy"
    )


# --- the documented program ---------------------------------------------------------------
# fmt: off
import os
import time

from m3grpc import ElicitationResponse, MCPTestKit
from m3grpc.storage import SQLiteExecutionStore
from m3grpc.types import ExecutionStatus

# `shipping_server` is the application's configured stdio server binding.
shipping_server = binding()  # (test binding; see the module docstring)
# Set this to a model enabled for the signed-in Codex account.
store = SQLiteExecutionStore("executions.sqlite")
try:
    with MCPTestKit(store=store, env={}) as kit:
        agent = kit.agents(
            [
                {
                    "harness": "codex",
                    "models": [os.environ["M3_DOCS_CODEX_MODEL"]],
                }
            ]
        )[0]
        handle = agent.submit(
            "Ask for the delivery address, then book the shipment.",
            server=shipping_server,
            tools=["shipping:book_shipment"],
            human_input="managed",
        )
        deadline = time.monotonic() + 120
        pending = handle.pending_elicitation()
        while pending is None and time.monotonic() < deadline:
            snapshot = handle.snapshot()
            if snapshot.lifecycle is ExecutionStatus.FINISHED:
                raise RuntimeError(
                    "execution finished before it requested managed input: "
                    f"{snapshot.outcome}"
                )
            time.sleep(0.2)
            pending = handle.pending_elicitation()
        if pending is None:
            raise TimeoutError("execution did not request managed input")
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
        result = handle.result(timeout=120)
finally:
    store.close()
# fmt: on
# --- end of the documented program --------------------------------------------------------

print(
    json.dumps(
        {
            "round": pending.model_dump(mode="json"),
            "result": result.model_dump(mode="json"),
        }
    )
)
