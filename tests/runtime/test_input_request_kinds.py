"""Roots next to an elicitation in one 2026-07-28 round, through the managed runtime."""

from __future__ import annotations

import sys

import pytest

from m3grpc import ElicitationResponse, FormElicitationRequest, MCPTestKit, StdioServer
from m3grpc.types import ExecutionOutcome
from tests.runtime.conftest import MCP_SERVERS, text_of, wait_pending


@pytest.mark.parametrize("variant", ["legacy", "mrtr"])
def test_roots_are_answered_and_only_the_elicitation_is_the_round(
    kit: MCPTestKit, variant: str
) -> None:
    server = StdioServer.model_validate(
        {
            "name": "workspace",
            "command": sys.executable,
            "args": [str(MCP_SERVERS / "workspace.py"), "--variant", variant],
            "roots": [{"uri": "file:///srv/project", "name": "project"}],
        }
    )
    agent = kit.agents([{"harness": "scripted", "models": []}])[0]
    handle = agent.submit(
        "Review the workspace.",
        server=server,
        tools=["workspace:review_workspace"],
        human_input="managed",
    )
    pending = wait_pending(handle)
    [(key, request)] = pending.requests.items()
    assert isinstance(request, FormElicitationRequest)
    handle.respond_elicitation(
        pending.round_id,
        {key: ElicitationResponse(action="accept", content={"topic": "security"})},
        idempotency_key="topic",
    )
    result = handle.result(timeout=60)

    assert result.outcome is ExecutionOutcome.SUCCEEDED, result
    assert text_of(result.operations[0].result) == "review security in file:///srv/project"
