"""The worker pool claims a queue of executions several at a time (m3grpc/runtime/worker.py),
against a real SQLite store and a real Streamable HTTP MCP server."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from m3grpc import AsyncMCPTestKit, HttpServer
from m3grpc.harness import HarnessTask
from m3grpc.storage import SQLiteExecutionStore
from m3grpc.storage.loop_calls import suspend
from m3grpc.types import ExecutionOutcome, ExecutionStatus, OperationResult
from tests.support.mcp_processes import http_mcp_server

QUEUED = 12


def test_a_queue_of_executions_is_claimed_several_at_once(tmp_path: Path) -> None:
    """With many executions queued, claims run at once (on SQLite they share a commit)
    instead of one transaction after another; each execution is claimed once and runs."""

    async def scenario(url: str) -> None:
        store = SQLiteExecutionStore(tmp_path / "m3.sqlite")
        claim_next = store.claim_next
        all_queued = asyncio.Event()
        lock = threading.Lock()
        in_flight = 0
        most = 0
        claimed: list[str] = []

        def counted(**kwargs: Any) -> Any:
            nonlocal in_flight, most
            # The first claim waits until the whole queue is there (in its greenlet
            # on the loop, as SQLite store calls run).
            suspend(asyncio.wait_for(all_queued.wait(), 60))
            with lock:
                in_flight += 1
                most = max(most, in_flight)
            try:
                result = claim_next(**kwargs)
            finally:
                with lock:
                    in_flight -= 1
            if result is not None:
                claimed.append(result.execution_id)
            return result

        store.claim_next = counted  # type: ignore[method-assign]
        try:
            async with AsyncMCPTestKit(store=store, env={}, concurrency=QUEUED + 4) as kit:
                agent = kit.agents([{"harness": "scripted", "models": []}])[0]
                binding = HttpServer(name="shipping", url=url, protocol="legacy")
                handles = [
                    await agent.submit("Quote.", server=binding, tools=["shipping:quote"])
                    for _ in range(QUEUED)
                ]
                all_queued.set()
                for handle in handles:
                    result = await handle.result(timeout=60)
                    assert result.outcome is ExecutionOutcome.SUCCEEDED
        finally:
            store.close()
        assert sorted(claimed) == sorted(h.execution_id for h in handles)
        # One claim after another never has two in flight.
        assert most > 1

    with http_mcp_server("shipping", "legacy") as url:
        asyncio.run(asyncio.wait_for(scenario(url), 120))


class _Gated:
    """A harness whose runs wait until the test opens the gate (holding their slot)."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()

    async def run(self, task: HarnessTask, resolver: Any) -> list[OperationResult]:
        await self.gate.wait()
        return []


def test_a_submission_with_a_free_slot_is_claimed_in_its_creating_transaction(
    tmp_path: Path,
) -> None:
    """With a free slot and nothing queued, the runtime's own worker claims a new
    execution in the transaction that creates it: it is running when submit returns.
    With no slot free it is queued, and claimed once a slot frees."""

    async def scenario() -> None:
        store = SQLiteExecutionStore(tmp_path / "m3.sqlite")
        gated = _Gated()
        try:
            async with AsyncMCPTestKit(
                store=store, env={}, concurrency=1, harnesses={"gated": gated}
            ) as kit:
                agent = kit.agents([{"harness": "gated", "models": []}])[0]
                binding = HttpServer(name="unused", url="http://127.0.0.1:9/mcp")
                # Until the pool has found the queue empty (its first claims run on
                # their own), a submission queues: work left from before goes first.
                held = None
                for _ in range(50):
                    handle = await agent.submit("Go.", server=binding)
                    # Read at once, on the loop: no claim could have run since the commit.
                    state = store.get_state(handle.execution_id)
                    if state.lifecycle is ExecutionStatus.RUNNING:
                        held = handle
                        break
                    assert state.lifecycle is ExecutionStatus.QUEUED
                    gated.gate.set()
                    assert (await handle.result(timeout=60)).outcome is ExecutionOutcome.SUCCEEDED
                    gated.gate.clear()
                assert held is not None
                # The one slot is held: the next submission queues.
                queued = await agent.submit("Go.", server=binding)
                assert store.get_state(queued.execution_id).lifecycle is ExecutionStatus.QUEUED
                gated.gate.set()
                for handle in (held, queued):
                    result = await handle.result(timeout=60)
                    assert result.outcome is ExecutionOutcome.SUCCEEDED
        finally:
            store.close()

    asyncio.run(asyncio.wait_for(scenario(), 120))
