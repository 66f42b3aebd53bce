"""Stopping the runtime (`WorkerPool.stop`, m3grpc/runtime/worker.py) right after an
execution was cancelled: the execution's clean-up runs to its end. A second cancel
would cut it short: the MCP SDK's stdio client stops its server in a shield that a
task's cancel still breaks, and then waits for good for the server's stdout to close,
the server never told to exit (seen as a hung `MCPTestKit` exit in the suite)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from m3grpc import AsyncMCPTestKit, HttpServer
from m3grpc.harness import HarnessTask, InputResolver
from m3grpc.storage import SQLiteExecutionStore
from m3grpc.types import ExecutionOutcome, OperationResult

# Longer than the runtime takes from a Cancel to its stop's last cancels (grace 0).
CLEAN_UP_SECONDS = 0.5


class _CleansUpSlowly:
    """A harness whose run waits until it is cancelled, then takes a while to clean up
    (as the SDK's stdio client does, stopping its server) before it ends."""

    name = "slow_clean_up"

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancels = 0
        self.cleaned_up = False

    async def run(self, task: HarnessTask, resolve_input: InputResolver) -> list[OperationResult]:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancels += 1
            try:
                await asyncio.sleep(CLEAN_UP_SECONDS)
            except asyncio.CancelledError:
                self.cancels += 1
                raise
            self.cleaned_up = True
            raise
        return []


def test_stopping_right_after_a_cancel_lets_the_execution_clean_up(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = SQLiteExecutionStore(tmp_path / "m3.sqlite")
        harness = _CleansUpSlowly()
        try:
            async with AsyncMCPTestKit(
                store=store, env={}, harnesses={"slow_clean_up": harness}
            ) as kit:
                agent = kit.agents([{"harness": "slow_clean_up", "models": []}])[0]
                binding = HttpServer(name="unused", url="http://127.0.0.1:9/mcp")
                handle = await agent.submit("Go.", server=binding)
                await asyncio.wait_for(harness.started.wait(), 60)
                await handle.cancel()
            # The kit's exit stopped the runtime (grace 0) while the clean-up ran.
            assert (harness.cancels, harness.cleaned_up) == (1, True)
            assert store.get_state(handle.execution_id).outcome is ExecutionOutcome.CANCELLED
        finally:
            store.close()

    asyncio.run(asyncio.wait_for(scenario(), 120))
