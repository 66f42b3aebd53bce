"""The managed flow on PostgreSQL, the backend of multi-replica deployments."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from m3grpc import ElicitationResponse, MCPTestKit
from m3grpc.storage import SqlExecutionStore
from m3grpc.types import ExecutionOutcome, ManagedInputStatus
from tests.runtime.conftest import mcp_server, text_of, wait_pending
from tests.storage.conftest import POSTGRES_URL, postgres_database

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(POSTGRES_URL is None, reason="M3_TEST_POSTGRES_URL not set"),
]


@pytest.fixture
def postgres_store() -> Iterator[SqlExecutionStore]:
    for url in postgres_database():
        store = SqlExecutionStore(url)
        try:
            yield store
        finally:
            store.close()


@pytest.mark.parametrize("variant", ["legacy", "mrtr"])
def test_seed_flow_on_postgresql(postgres_store: SqlExecutionStore, variant: str) -> None:
    assert postgres_store.dialect == "postgresql"
    with MCPTestKit(store=postgres_store, env={}, poll_interval=0.2) as kit:
        agent = kit.agents([{"harness": "scripted", "models": []}])[0]
        handle = agent.submit(
            "Book it.",
            server=mcp_server("shipping", variant),
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
    record = postgres_store.managed_input_store.get_round(pending.round_id)
    assert record.status is ManagedInputStatus.RESOLVED
