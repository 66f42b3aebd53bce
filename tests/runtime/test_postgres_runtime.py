"""The managed flow on PostgreSQL, the backend of multi-replica deployments."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from m3grpc import MCPTestKit
from m3grpc.storage import SqlExecutionStore
from m3grpc.types import ExecutionOutcome, ManagedInputStatus
from tests.runtime.conftest import BOOKED, book_shipment_managed, mcp_server, text_of
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
        round_id, result = book_shipment_managed(kit, mcp_server("shipping", variant))
    assert result.outcome is ExecutionOutcome.SUCCEEDED
    assert text_of(result.operations[0].result) == BOOKED
    record = postgres_store.managed_input_store.get_round(round_id)
    assert record.status is ManagedInputStatus.RESOLVED
