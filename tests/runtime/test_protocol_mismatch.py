"""A binding pinned to 2026-07-28 against a legacy-only server: the execution says so."""

from __future__ import annotations

import sys

from m3grpc import MCPTestKit, StdioServer
from m3grpc.types import ExecutionOutcome
from tests.runtime.conftest import MCP_SERVERS


def test_execution_fails_protocol_mismatch(kit: MCPTestKit) -> None:
    server = StdioServer(
        name="shipping",
        command=sys.executable,
        args=(str(MCP_SERVERS / "shipping.py"), "--variant", "legacy"),
        protocol="2026-07-28",
    )
    agent = kit.agents([{"harness": "scripted", "models": []}])[0]
    handle = agent.submit(
        "Book the shipment.",
        server=server,
        tools=["shipping:book_shipment", "shipping:quote"],
        human_input="managed",
    )
    result = handle.result(timeout=60)

    assert result.outcome is ExecutionOutcome.FAILED
    assert result.failure_code == "protocol_mismatch"
    assert "pinned to MCP protocol 2026-07-28" in (result.failure_message or "")
    assert "offered 2025-11-25" in (result.failure_message or "")
    # The first operation stopped the script.
    assert [op.failure_code for op in result.operations] == ["protocol_mismatch"]
