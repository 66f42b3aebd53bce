"""The embedded handle reads an overdue round as Respond treats it, and the
sweeper finishes its execution with no worker (docs/how-it-works/status-and-sweeping.md),
on SQLite and PostgreSQL.

A 2026-07-28 round handed over when one kit stops is read through a second kit
without worker slots: past its deadline the handle has no pending round, the
round reads failed, an answer is refused and the execution finishes failed
`operation_timeout` without a worker picking it up.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from m3grpc import AsyncExecutionHandle, AsyncMCPTestKit, ElicitationResponse, StdioServer
from m3grpc.errors import ManagedInputStateError, OperationTimeout
from m3grpc.storage import SqlExecutionStore
from m3grpc.types import ExecutionOutcome, ExecutionStatus, ManagedInputStatus
from tests.storage.conftest import BACKENDS, backend_database

from .conftest import MCP_SERVERS

# Long enough for the first kit to stop and hand the round over before it runs out.
ROUND_TIMEOUT_SECONDS = 6.0
ANSWER = {"shipping_address": ElicitationResponse(action="decline")}


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlExecutionStore]:
    for database in backend_database(request, tmp_path / "m3.sqlite"):
        store = SqlExecutionStore(database)
        try:
            yield store
        finally:
            store.close()


LEDGER = StdioServer(
    name="ledger",
    command=sys.executable,
    args=(str(MCP_SERVERS / "ledger.py"),),
    protocol="2026-07-28",
)


async def test_an_embedded_handle_sees_a_handed_over_round_fail_at_its_deadline(
    store: SqlExecutionStore, tmp_path: Path
) -> None:
    ledger = str(tmp_path / "ledger.txt")
    async with AsyncMCPTestKit(store=store, env={}, lease_seconds=2, poll_interval=0.2) as first:
        (agent,) = first.agents([{"harness": "scripted", "models": []}])
        handle = await agent.submit(
            "Reserve a crate, then book its shipment.",
            server=LEDGER,
            tools=["ledger:reserve", "ledger:book"],
            script=[
                {"kind": "tool", "name": "reserve", "arguments": {"ledger": ledger, "item": "c"}},
                {"kind": "tool", "name": "book", "arguments": {"ledger": ledger}},
            ],
            human_input="managed",
            round_timeout_seconds=ROUND_TIMEOUT_SECONDS,
        )
        pending = await handle.wait_for_pending(timeout=60)
        assert pending is not None and pending.deadline is not None
    # The first kit stopped: the round was handed over, not failed.
    async with AsyncMCPTestKit(store=store, env={}, concurrency=0, poll_interval=0.2) as idle:
        handle = AsyncExecutionHandle(idle.runtime, handle.execution_id)
        assert datetime.now(UTC) < pending.deadline, "the hand-over outlasted the round's timeout"
        assert await handle.pending_elicitation() == pending
        await asyncio.sleep((pending.deadline - datetime.now(UTC)).total_seconds() + 0.05)

        assert await handle.pending_elicitation() is None
        record = await idle.runtime.get_round(pending.round_id)
        assert (record.status, record.failure_code) == (
            ManagedInputStatus.FAILED,
            "operation_timeout",
        )
        # Refused: at the deadline (before the sweep), or as failed (after it).
        with pytest.raises((OperationTimeout, ManagedInputStateError)):
            await handle.respond_elicitation(pending.round_id, ANSWER, idempotency_key="late")
        result = await handle.result(timeout=60)
        assert (result.outcome, result.failure_code) == (
            ExecutionOutcome.FAILED,
            "operation_timeout",
        )
        assert [op.ok for op in result.operations] == [True, False]
        assert (await handle.snapshot()).lifecycle is ExecutionStatus.FINISHED
