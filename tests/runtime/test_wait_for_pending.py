"""The kit's push-based wait for a pending round: `wait_for_pending` and `pending_rounds`,
against real MCP servers (Streamable HTTP and stdio) and a real SQLite store."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from m3grpc import AsyncMCPTestKit, ElicitationResponse, HttpServer, MCPTestKit
from m3grpc.storage import SQLiteExecutionStore
from m3grpc.types import ExecutionOutcome, ManagedInputStatus
from tests.runtime.conftest import confirmed_shipment_answers, mcp_server, text_of
from tests.support.mcp_processes import http_mcp_server

ADDRESS = ElicitationResponse(action="accept", content={"street": "1 Main Street", "city": "Pune"})
PROMPT = "Book the shipment."


@pytest.mark.parametrize("variant", ["legacy", "mrtr"])
def test_pending_rounds_yields_each_round_once_over_http(tmp_path: Path, variant: str) -> None:
    """Two rounds of one call over Streamable HTTP: the iterator yields each once, in
    order, then ends when the execution finishes; the shared HTTP client serves both
    executions of the binding."""

    async def scenario(url: str) -> None:
        store = SQLiteExecutionStore(tmp_path / "m3.sqlite")
        try:
            async with AsyncMCPTestKit(store=store, env={}, poll_interval=30.0) as kit:
                agent = kit.agents([{"harness": "scripted", "models": []}])[0]
                binding = HttpServer(
                    name="shipping",
                    url=url,
                    protocol="legacy" if variant == "legacy" else "2026-07-28",
                )
                for _ in range(2):
                    handle = await agent.submit(
                        PROMPT,
                        server=binding,
                        tools=["shipping:book_confirmed_shipment"],
                        human_input="managed",
                    )
                    seen: list[str] = []
                    async for pending in handle.pending_rounds():
                        seen.append(pending.round_id)
                        await handle.respond_elicitation(
                            pending.round_id,
                            confirmed_shipment_answers(pending),
                            idempotency_key=f"k-{pending.round_id}",
                        )
                    assert len(seen) == 2 and seen[0] != seen[1]
                    result = await handle.result(timeout=60)
                    assert result.outcome is ExecutionOutcome.SUCCEEDED
                    assert "Pune" in text_of(result.operations[0].result)
                    # Finished: no round will come.
                    assert await handle.wait_for_pending(timeout=5) is None
        finally:
            store.close()

    # The poll interval is far above how long the test takes: a round is seen
    # because the worker wakes the waiter, not because the waiter polls.
    with http_mcp_server("shipping", variant) as url:
        asyncio.run(asyncio.wait_for(scenario(url), 120))


def test_wait_for_pending_sync_returns_the_round_and_times_out_when_none_comes(
    tmp_path: Path,
) -> None:
    store = SQLiteExecutionStore(tmp_path / "m3.sqlite")
    try:
        with MCPTestKit(store=store, env={}, poll_interval=30.0) as kit:
            agent = kit.agents([{"harness": "scripted", "models": []}])[0]
            handle = agent.submit(
                PROMPT,
                server=mcp_server("shipping"),
                tools=["shipping:book_shipment"],
                human_input="managed",
            )
            pending = handle.wait_for_pending(timeout=60)
            assert pending is not None
            assert pending.execution_id == handle.execution_id
            assert list(pending.requests) == ["shipping_address"]
            record = store.managed_input_store.get_round(pending.round_id)
            assert record.status is ManagedInputStatus.PENDING
            # Still pending: the same round again, at once.
            again = handle.wait_for_pending(timeout=5)
            assert again is not None and again.round_id == pending.round_id
            # Iterating past the round already seen waits for a next one: none comes
            # until it is answered, so the wait times out.
            rounds = handle.pending_rounds()
            assert next(rounds).round_id == pending.round_id
            with pytest.raises(TimeoutError):
                kit._loop_thread().run(
                    kit._async_kit.runtime.wait_for_pending(
                        handle.execution_id, 0.3, skip_round_id=pending.round_id
                    )
                )
            handle.respond_elicitation(
                pending.round_id, {"shipping_address": ADDRESS}, idempotency_key="a"
            )
            assert list(rounds) == []  # the execution finished: the iterator ends
            assert handle.result(timeout=60).outcome is ExecutionOutcome.SUCCEEDED
            assert handle.wait_for_pending(timeout=5) is None
    finally:
        store.close()


def test_waiting_on_an_execution_this_process_runs_does_not_poll(tmp_path: Path) -> None:
    """This process's worker stores the execution's rounds and wakes the waiter itself:
    a wait on an execution it runs reads the database once, however short the polling
    interval (each waiter re-reading every interval cost a read per waiter per interval
    with many executions in flight)."""

    async def scenario() -> None:
        store = SQLiteExecutionStore(tmp_path / "m3.sqlite")
        try:
            async with AsyncMCPTestKit(store=store, env={}, poll_interval=0.02) as kit:
                agent = kit.agents([{"harness": "scripted", "models": []}])[0]
                handle = await agent.submit(
                    PROMPT,
                    server=mcp_server("shipping"),
                    tools=["shipping:book_shipment"],
                    human_input="managed",
                )
                pending = await handle.wait_for_pending(timeout=60)
                assert pending is not None
                rounds = store.managed_input_store
                reads: list[str] = []
                list_rounds = rounds.list_rounds

                def counted(*args: object, **kwargs: object) -> object:
                    reads.append("list_rounds")
                    return list_rounds(*args, **kwargs)  # type: ignore[arg-type]

                rounds.list_rounds = counted  # type: ignore[method-assign]
                try:
                    with pytest.raises(TimeoutError):
                        await kit.runtime.wait_for_pending(
                            handle.execution_id, 0.5, skip_round_id=pending.round_id
                        )
                finally:
                    del rounds.list_rounds
                # A read at the start and a last look at the deadline; a wait that
                # polled every interval read about 25 times.
                assert len(reads) <= 2, reads
                await handle.respond_elicitation(
                    pending.round_id, {"shipping_address": ADDRESS}, idempotency_key="a"
                )
                assert (await handle.result(timeout=60)).outcome is ExecutionOutcome.SUCCEEDED
                # Finished (no longer run here): the state is read, and there is no round.
                assert await handle.wait_for_pending(timeout=5) is None
        finally:
            store.close()

    asyncio.run(asyncio.wait_for(scenario(), 120))


def test_a_wait_on_a_running_execution_without_a_round_reads_no_round(tmp_path: Path) -> None:
    """While this process's worker runs the execution and holds no round, the wait
    reads no round from the store: the round the worker stores wakes it, with the
    record. Once the worker holds a round (answered, here), a wait reads again."""

    async def scenario(url: str) -> None:
        store = SQLiteExecutionStore(tmp_path / "m3.sqlite")
        rounds_store = store.managed_input_store
        list_rounds = rounds_store.list_rounds
        reads: list[str | None] = []

        def counted(**kwargs: Any) -> Any:
            reads.append(kwargs.get("execution_id"))
            return list_rounds(**kwargs)

        rounds_store.list_rounds = counted  # type: ignore[method-assign]
        try:
            async with AsyncMCPTestKit(store=store, env={}, poll_interval=30.0) as kit:
                agent = kit.agents([{"harness": "scripted", "models": []}])[0]
                binding = HttpServer(name="shipping", url=url, protocol="2026-07-28")
                # Until the pool has found the queue empty, a submission may queue (and
                # a wait on a queued execution reads): run those through first.
                for _ in range(20):
                    handle = await agent.submit(
                        PROMPT,
                        server=binding,
                        tools=["shipping:book_confirmed_shipment"],
                        human_input="managed",
                    )
                    running = kit.runtime._pool is not None and kit.runtime._pool.runs(
                        handle.execution_id
                    )
                    first = await handle.wait_for_pending(timeout=60)
                    assert first is not None
                    if running:
                        assert handle.execution_id not in reads
                    await handle.respond_elicitation(
                        first.round_id,
                        confirmed_shipment_answers(first),
                        idempotency_key=f"k-{first.round_id}",
                    )
                    # Its answered round is still the worker's: this wait reads.
                    second = await handle.wait_for_pending(timeout=60)
                    assert second is not None and second.round_id != first.round_id
                    assert handle.execution_id in reads
                    await handle.respond_elicitation(
                        second.round_id,
                        confirmed_shipment_answers(second),
                        idempotency_key=f"k-{second.round_id}",
                    )
                    result = await handle.result(timeout=60)
                    assert result.outcome is ExecutionOutcome.SUCCEEDED
                    if running:
                        break
                assert running
        finally:
            store.close()

    with http_mcp_server("shipping", "mrtr") as url:
        asyncio.run(asyncio.wait_for(scenario(url), 120))
