"""A worker whose loop stalled past its lease before it opened a round keeps its
execution: the lease renews before the round is written (found by the crash
campaign, tests/campaigns: a fresh replica on a starved machine failed its first
executions with `managed_input_conflict`, "cannot create a round under an
expired lease"). A renewal that finds the lease gone because the execution's
finish just committed is no lost lease; a finish that finds the execution already
recovered (its lease lost with no renewal in between) is one."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from m3grpc import MCPTestKit
from m3grpc.runtime.lifecycle import LifecycleEvent
from m3grpc.storage import SQLiteExecutionStore
from m3grpc.storage.loop_calls import suspend
from m3grpc.types import ExecutionOutcome, ExecutionResult, ExecutionStatus, ManagedInputStatus
from tests.runtime.conftest import book_shipment_managed, mcp_server, submit_tool, wait_pending

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


# The heartbeat renews every lease / 3 (0.3 s): several run while a finish's return is held.
SHORT_LEASE_SECONDS = 0.9
FINISH_RETURN_HELD_SECONDS = 1.5


class AroundFinish(SQLiteExecutionStore):
    """A store that runs a hook before and after the worker's finish (either kind)."""

    def before_finish(self, execution_id: str) -> None:
        pass

    def after_finish(self) -> None:
        pass

    def finish(self, execution_id: str, *args: Any, **kwargs: Any) -> Any:
        self.before_finish(execution_id)
        finished = super().finish(execution_id, *args, **kwargs)
        self.after_finish()
        return finished

    def finish_settling(self, execution_id: str, *args: Any, **kwargs: Any) -> Any:
        self.before_finish(execution_id)
        finished = super().finish_settling(execution_id, *args, **kwargs)
        self.after_finish()
        return finished


class FinishReturnsLate(AroundFinish):
    """A store whose finish returns to its worker a while after it committed (on the
    loop, which goes on meanwhile): as a finish whose caller resumes after a renewal
    already found the lease gone with it (seen under load on PostgreSQL, where they
    run on threads)."""

    def after_finish(self) -> None:
        suspend(asyncio.sleep(FINISH_RETURN_HELD_SECONDS))


def seed_flow(
    store: SQLiteExecutionStore, lease_seconds: float
) -> tuple[ExecutionResult, list[LifecycleEvent]]:
    """The seed flow on `store` (closed after it): its result and lifecycle events."""
    events: list[LifecycleEvent] = []
    try:
        with MCPTestKit(
            store=store, env={}, poll_interval=0.05, lease_seconds=lease_seconds
        ) as kit:
            kit._async_kit.runtime.lifecycle.subscribe(events.append)
            _round_id, result = book_shipment_managed(kit, mcp_server("shipping"))
    finally:
        store.close()
    return result, events


def test_a_renewal_during_the_finish_is_no_lost_lease(tmp_path: Path) -> None:
    store = FinishReturnsLate(tmp_path / "executions.sqlite")
    result, events = seed_flow(store, SHORT_LEASE_SECONDS)
    assert result.outcome is ExecutionOutcome.SUCCEEDED
    names = [event.name for event in events]
    assert "execution.lease_lost" not in names
    finished = [event for event in events if event.name == "execution.finished"]
    assert [event.fields["outcome"] for event in finished] == ["succeeded"]


class RecoveredBeforeFinish(AroundFinish):
    """A store where, just before the worker's finish, another replica's recovery
    finished the execution: as after the worker's process stalled past its lease
    with no renewal in between (the finish is the first write to find it lost)."""

    def __init__(self, path: Path, clock: JumpingClock) -> None:
        super().__init__(path, clock=clock)
        self.jumping_clock = clock

    def before_finish(self, execution_id: str) -> None:
        self.jumping_clock.jump = timedelta(seconds=LEASE_SECONDS * 2)
        try:
            self.fail_recovery(execution_id)
        finally:
            self.jumping_clock.jump = timedelta()


def test_a_lease_lost_at_the_finish_counts_as_lost(tmp_path: Path) -> None:
    store = RecoveredBeforeFinish(tmp_path / "executions.sqlite", JumpingClock())
    result, events = seed_flow(store, LEASE_SECONDS)
    # Recovery's result stands (every operation had completed, so it earned
    # their outcome), stamped by the jumped clock: the worker's own was refused.
    assert result.outcome is ExecutionOutcome.SUCCEEDED
    assert result.finished_at > datetime.now(UTC) + timedelta(seconds=LEASE_SECONDS)
    lost = [event for event in events if event.name == "execution.lease_lost"]
    assert [event.fields["at_finish"] for event in lost] == [True]
    assert lost[0].fields["execution_id"] == result.execution_id
    assert not [event for event in events if event.name == "execution.finished"]
