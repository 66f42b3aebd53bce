"""Writes this process's notifier cannot hear (another process on the same SQLite
file) are found by one shared poll for every waiter: answers stored through another
store on the same file resume every paused execution, and their results reach
`result()` waiters, with no per-waiter polling."""

from __future__ import annotations

import asyncio
from pathlib import Path

from m3grpc import AsyncMCPTestKit, ElicitationResponse, HttpServer
from m3grpc.runtime.shared_poll import SAFETY_REREAD_SECONDS
from m3grpc.storage import SQLiteExecutionStore
from m3grpc.types import ExecutionOutcome, ManagedInputStatus
from tests.runtime.conftest import text_of
from tests.support.mcp_processes import http_mcp_server

ADDRESS = ElicitationResponse(action="accept", content={"street": "1 Main Street", "city": "Pune"})
PAUSED = 6


def test_answers_stored_elsewhere_resume_every_waiter(tmp_path: Path) -> None:
    async def scenario(url: str) -> None:
        path = tmp_path / "m3.sqlite"
        store = SQLiteExecutionStore(path)
        # Another engine on the file: its commits never reach the kit's notifier,
        # exactly like another process's.
        elsewhere = SQLiteExecutionStore(path)
        try:
            async with AsyncMCPTestKit(
                store=store, env={}, concurrency=PAUSED, poll_interval=0.2
            ) as kit:
                agent = kit.agents([{"harness": "scripted", "models": []}])[0]
                binding = HttpServer(name="shipping", url=url, protocol="legacy")
                handles = [
                    await agent.submit(
                        "Book the shipment.",
                        server=binding,
                        tools=["shipping:book_shipment"],
                        human_input="managed",
                    )
                    for _ in range(PAUSED)
                ]
                rounds = [await h.wait_for_pending(60) for h in handles]
                results = [asyncio.create_task(h.result(timeout=120)) for h in handles]
                for pending in rounds:
                    assert pending is not None
                    await asyncio.to_thread(
                        elsewhere.managed_input_store.submit_responses,
                        pending.round_id,
                        {"shipping_address": ADDRESS},
                        idempotency_key=f"k-{pending.round_id}",
                    )
                # Well before any waiter's own re-read: only the shared poll wakes them.
                done = await asyncio.wait_for(
                    asyncio.gather(*results), timeout=SAFETY_REREAD_SECONDS - 5
                )
                for result in done:
                    assert result.outcome is ExecutionOutcome.SUCCEEDED, result
                    assert "Pune" in text_of(result.operations[0].result)
                for pending in rounds:
                    assert pending is not None
                    record = store.managed_input_store.get_round(pending.round_id)
                    assert record.status is ManagedInputStatus.RESOLVED
        finally:
            elsewhere.close()
            store.close()

    with http_mcp_server("shipping", "legacy") as url:
        asyncio.run(scenario(url))
