"""Managed input over a Streamable HTTP MCP server binding."""

from __future__ import annotations

import pytest

from m3grpc import HttpServer, MCPTestKit
from m3grpc.types import ExecutionOutcome
from tests.runtime.conftest import BOOKED, book_shipment_managed, text_of
from tests.support.mcp_processes import http_mcp_server


@pytest.mark.parametrize("variant", ["legacy", "mrtr"])
def test_seed_flow_over_streamable_http(kit: MCPTestKit, variant: str) -> None:
    with http_mcp_server("shipping", variant) as url:
        # An SDK server over HTTP also speaks 2026-07-28; ctx.elicit needs legacy.
        protocol = "legacy" if variant == "legacy" else "auto"
        _, result = book_shipment_managed(
            kit, HttpServer(name="shipping", url=url, protocol=protocol)
        )
    assert result.outcome is ExecutionOutcome.SUCCEEDED
    assert text_of(result.operations[0].result) == BOOKED
