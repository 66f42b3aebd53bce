"""The remote handles wait as the embedded ones do (one handle API: tests/test_faces.py
pins the signatures): `wait_for_pending(timeout)` returns the round as soon as it is
pending, None once the execution finished without one, TimeoutError when the timeout
runs out; `pending_rounds()` yields each round once until the execution finishes.
Black box: a `m3grpc serve` subprocess and tests/mcp_servers/round_status.py."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from m3grpc import ElicitationResponse
from m3grpc.client import AsyncRemoteMCPTestKit, RemoteMCPTestKit
from m3grpc.types import ExecutionOutcome, ExecutionStatus

from .conftest import ADDRESS, BOOKED, ServerProcess
from .test_round_status import start, wait_for_file

SERVER = "round_status"


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = start(tmp_path_factory.mktemp("waits"))
    try:
        yield process
    finally:
        process.stop()


def script(tool: str, times: int = 1, **arguments: str) -> dict[str, Any]:
    """A scripted agent's submit options: call `tool` of the binding `times` times."""
    step = {"kind": "tool", "name": tool, "arguments": arguments}
    return {"server": SERVER, "tools": [f"{SERVER}:{tool}"], "script": [step] * times}


def answer() -> dict[str, ElicitationResponse]:
    return {"shipping_address": ElicitationResponse(action="accept", content=ADDRESS)}


def test_the_embedded_seed_program_runs_on_the_remote_kit(service: ServerProcess) -> None:
    # The README's embedded program, with only the kit swapped.
    with RemoteMCPTestKit(service.address) as kit:
        agent = kit.agents([{"harness": "scripted", "models": []}])[0]
        handle = agent.submit(
            "Ask for the delivery address, then book the shipment.",
            **script("ask_address"),
            human_input="managed",
        )
        pending = handle.wait_for_pending(timeout=60)
        assert pending is not None, "the execution finished without asking for input"
        outcome = handle.respond_elicitation(
            pending.round_id, answer(), idempotency_key=f"a-{pending.round_id}"
        )
        result = handle.result(timeout=120)
        # Finished: no round will come.
        assert handle.wait_for_pending(timeout=60) is None
        assert handle.wait_for_pending(timeout=0) is None
    assert outcome.round_id == pending.round_id
    assert result.outcome is ExecutionOutcome.SUCCEEDED
    assert result.operations[0].result is not None
    assert result.operations[0].result["structuredContent"]["result"] == BOOKED


def test_a_wait_without_a_round_times_out_and_ends_with_the_execution(
    service: ServerProcess, tmp_path: Path
) -> None:
    with RemoteMCPTestKit(service.address) as kit:
        agent = kit.agents([{"harness": "scripted", "models": []}])[0]
        handle = agent.submit(
            "Hold.", **script("hold", marker_dir=str(tmp_path)), human_input="managed"
        )
        wait_for_file(tmp_path / "holding")  # running, and no round will come
        with pytest.raises(TimeoutError, match=r"had no pending round within 0\.3 s"):
            handle.wait_for_pending(timeout=0.3)
        with pytest.raises(TimeoutError, match=r"had no pending round within 0\.0 s"):
            handle.wait_for_pending(timeout=0)
        assert handle.snapshot().lifecycle is not ExecutionStatus.FINISHED
        (tmp_path / "release").write_text("go")
        assert handle.wait_for_pending() is None
        assert list(handle.pending_rounds()) == []
        assert handle.result(timeout=60).outcome is ExecutionOutcome.SUCCEEDED


async def test_the_async_handle_waits_the_same_way(service: ServerProcess, tmp_path: Path) -> None:
    async with AsyncRemoteMCPTestKit(service.address) as kit:
        agent = kit.agents([{"harness": "scripted", "models": []}])[0]
        held = await agent.submit(
            "Hold.", **script("hold", marker_dir=str(tmp_path)), human_input="managed"
        )
        await asyncio.to_thread(wait_for_file, tmp_path / "holding")
        with pytest.raises(TimeoutError):
            await held.wait_for_pending(timeout=0.3)
        (tmp_path / "release").write_text("go")
        assert await held.wait_for_pending() is None

        asking = await agent.submit("Ask.", **script("ask_address"), human_input="managed")
        seen = []
        async for pending in asking.pending_rounds():
            seen.append(pending.round_id)
            await asking.respond_elicitation(
                pending.round_id, answer(), idempotency_key=pending.round_id
            )
        result = await asking.result(timeout=60)
    assert len(seen) == 1
    assert result.outcome is ExecutionOutcome.SUCCEEDED


def test_pending_rounds_yields_each_round_once_until_the_execution_finishes(
    service: ServerProcess,
) -> None:
    with RemoteMCPTestKit(service.address) as kit:
        agent = kit.agents([{"harness": "scripted", "models": []}])[0]
        handle = agent.submit("Ask twice.", **script("ask_address", 2), human_input="managed")
        seen = []
        for pending in handle.pending_rounds():
            seen.append(pending.round_id)
            handle.respond_elicitation(pending.round_id, answer(), idempotency_key=pending.round_id)
        result = handle.result(timeout=60)
    assert len(seen) == 2 and len(set(seen)) == 2
    assert result.outcome is ExecutionOutcome.SUCCEEDED
