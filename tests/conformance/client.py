"""The MCP client under test for `@modelcontextprotocol/conformance client`.

The conformance runner starts `python client.py <server-url>` with
MCP_CONFORMANCE_SCENARIO set. This client is M3 itself: it submits an execution
whose scripted harness (a real MCP client) runs against the scenario's server,
and exits 0 only if the execution succeeded.
"""

from __future__ import annotations

import os
import sys

from m3grpc import HttpServer, MCPTestKit
from m3grpc.types import ExecutionOutcome

# scenario -> (tool to call, elicitation plan answering it)
SCENARIOS = {
    "elicitation-sep1034-client-defaults": (
        "test_client_elicitation_defaults",
        {"rules": [{"action": "accept", "use_schema_defaults": True}]},
    ),
}


def main() -> int:
    url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    if scenario not in SCENARIOS:
        print(f"unsupported scenario {scenario!r}", file=sys.stderr)
        return 2
    tool, plan = SCENARIOS[scenario]
    with MCPTestKit() as kit:
        agent = kit.agents([{"harness": "scripted", "models": []}])[0]
        handle = agent.submit(
            f"Run conformance scenario {scenario}",
            server=HttpServer(name="conformance", url=url),
            tools=[f"conformance:{tool}"],
            elicitation_plan=plan,
        )
        result = handle.result(timeout=25)
    for operation in result.operations:
        print(operation.operation_name, operation.ok, operation.result or operation.failure_message)
    return 0 if result.outcome is ExecutionOutcome.SUCCEEDED else 1


if __name__ == "__main__":
    raise SystemExit(main())
