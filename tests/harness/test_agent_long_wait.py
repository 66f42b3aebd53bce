"""A pending elicitation waits for a person for minutes, under both agent harnesses.

Nothing in the agent CLIs times a pending elicitation out: Codex pauses its MCP tool-call
timer (60 s by default) while one is pending, and Claude Code's MCP tool timeout (which
would cut one) is set to its maximum by the harness. One execution per agent is paused
at once, for WAIT_SECONDS (more than twice Codex's tool timeout, five of Claude Code's
progress heartbeats), then answered, and each completes. The file runs first in the
suite (tests/conftest.py), beside the others: it mostly waits.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from m3grpc import ElicitationResponse, MCPTestKit
from m3grpc.storage import SQLiteExecutionStore
from m3grpc.types import ExecutionOutcome, ExecutionStatus
from tests.harness.matrix.agents import AGENTS, Agent
from tests.harness.matrix.cells import LEGACY
from tests.harness.matrix.scenarios import BOOKED, BOOKING, python_server, wait_round

WAIT_SECONDS = 150.0


@pytest.fixture
def agents() -> Iterator[list[Agent]]:
    with ExitStack() as stack:
        yield [stack.enter_context(AGENTS[name]()) for name in ("codex", "claude-code")]


def test_a_pending_elicitation_waits_minutes_for_its_answer(
    agents: list[Agent], tmp_path: Path
) -> None:
    with ExitStack() as stack:
        handles = []
        for agent in agents:
            store = SQLiteExecutionStore(tmp_path / f"{agent.name}.sqlite")
            stack.callback(store.close)
            kit: MCPTestKit = stack.enter_context(agent.kit(store))
            handles.append(
                agent.submit(kit, python_server("booking", LEGACY), [("book_table", {})])
            )
        pendings = [wait_round(handle) for handle in handles]
        time.sleep(WAIT_SECONDS)
        for handle, pending in zip(handles, pendings, strict=True):
            # Still paused on the same round: nothing gave up meanwhile.
            assert handle.snapshot().lifecycle is ExecutionStatus.WAITING_FOR_INPUT
            assert handle.pending_elicitation() == pending
            handle.respond_elicitation(
                pending.round_id,
                {"table_booking": ElicitationResponse(action="accept", content=BOOKING)},
                idempotency_key=f"late-{pending.round_id}",
            )
        for agent, handle in zip(agents, handles, strict=True):
            result = handle.result(timeout=180)
            assert result.outcome is ExecutionOutcome.SUCCEEDED, (agent.name, result)
            assert result.agent is not None and result.agent.final_message == f"Done: {BOOKED}"
