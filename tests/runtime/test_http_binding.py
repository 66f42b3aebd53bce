"""Managed input over a Streamable HTTP MCP server binding."""

from __future__ import annotations

import pytest

from m3grpc import ElicitationResponse, HttpServer, MCPTestKit
from m3grpc.types import ExecutionOutcome
from tests.runtime.conftest import text_of, wait_pending
from tests.support.mcp_processes import http_mcp_server


@pytest.mark.parametrize("variant", ["legacy", "mrtr"])
def test_seed_flow_over_streamable_http(kit: MCPTestKit, variant: str) -> None:
    with http_mcp_server("shipping", variant) as url:
        agent = kit.agents([{"harness": "scripted", "models": []}])[0]
        handle = agent.submit(
            "Book it.",
            server=HttpServer(
                name="shipping", url=url, protocol="legacy" if variant == "legacy" else "auto"
            ),
            tools=["shipping:book_shipment"],
            human_input="managed",
        )
        pending = wait_pending(handle)
        handle.respond_elicitation(
            pending.round_id,
            {
                "shipping_address": ElicitationResponse(
                    action="accept", content={"street": "1 Main Street", "city": "Pune"}
                )
            },
            idempotency_key="k",
        )
        result = handle.result(timeout=60)
    assert result.outcome is ExecutionOutcome.SUCCEEDED
    assert text_of(result.operations[0].result) == "booked shipment to 1 Main Street, Pune"
