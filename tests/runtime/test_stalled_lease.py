"""A worker whose loop stalled past its lease before it opened a round keeps its
execution: the lease renews before the round is written (found by the crash
campaign, tests/campaigns: a fresh replica on a starved machine failed its first
executions with `managed_input_conflict`, "cannot create a round under an
expired lease")."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from m3grpc import MCPTestKit
from m3grpc.storage import SQLiteExecutionStore
from m3grpc.types import ExecutionStatus, ManagedInputStatus
from tests.runtime.conftest import submit_tool, wait_pending

# Long: the heartbeat (every lease / 3) never runs during the test, only the
# renewal before the round can rescue the lapsed lease.
LEASE_SECONDS = 600.0


class JumpingClock:
    """The real time, plus a jump a test makes (a stall, as the lease sees it)."""

    def __init__(self) -> None:
        self.jump = timedelta()

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.jump


def test_a_lease_lapsed_before_the_round_renews(tmp_path: Path) -> None:
    clock = JumpingClock()
    store = SQLiteExecutionStore(tmp_path / "executions.sqlite", clock=clock)
    try:
        with MCPTestKit(
            store=store, env={}, poll_interval=0.05, lease_seconds=LEASE_SECONDS
        ) as kit:
            handle = submit_tool(kit, "shipping:book_shipment")
            # Claimed, and the stdio MCP server still starting: no round yet.
            for _ in range(6000):
                if handle.snapshot().lifecycle is not ExecutionStatus.QUEUED:
                    break
                time.sleep(0.005)
            assert handle.pending_elicitation() is None, "the round came before the stall"
            # Past the lease and before the heartbeat's next renewal (every lease / 3).
            clock.jump = timedelta(seconds=LEASE_SECONDS * 2)
            pending = wait_pending(handle)
            record = store.managed_input_store.get_round(pending.round_id)
            assert record.status is ManagedInputStatus.PENDING
            assert record.lease is not None and record.lease.expires_at > clock()
    finally:
        store.close()
