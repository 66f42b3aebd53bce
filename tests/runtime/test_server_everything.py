"""@modelcontextprotocol/server-everything over stdio, answered through the handle API."""

from __future__ import annotations

import pytest

from m3grpc import (
    ElicitationResponse,
    FormElicitationRequest,
    ManagedInputValidationError,
    MCPTestKit,
    StdioServer,
)
from m3grpc.types import ExecutionOutcome
from tests.runtime.conftest import wait_pending
from tests.support.node import node_tools

VALID = {
    "name": "Ada Lovelace",
    "check": True,
    "email": "ada@example.org",
    "homepage": "https://example.org/ada",
    "birthdate": "1815-12-10",
    "integer": 7,
    "number": 2.5,
    "untitledSingleSelectEnum": "Joey",
    "untitledMultipleSelectEnum": ["Piano"],
    "titledSingleSelectEnum": "hero-2",
    "titledMultipleSelectEnum": ["fish-3"],
    "legacyTitledEnum": "pet-2",
}


@pytest.mark.node
def test_everything_form_elicitation_with_invalid_answer_first(kit: MCPTestKit) -> None:
    tools = node_tools()
    everything = StdioServer(
        name="everything",
        command=tools["M3_SYSTEM_NODE"],
        args=(tools["M3_EVERYTHING_JS"], "stdio"),
    )
    agent = kit.agents([{"harness": "scripted", "models": []}])[0]
    handle = agent.submit(
        "Ask me for my details.",
        server=everything,
        tools=["everything:trigger-elicitation-request"],
        human_input="managed",
    )
    pending = wait_pending(handle)
    ((key, request),) = pending.requests.items()
    assert isinstance(request, FormElicitationRequest)
    assert len(request.requested_schema["properties"]) == 13
    assert request.requested_schema["properties"]["email"]["format"] == "email"

    with pytest.raises(ManagedInputValidationError) as caught:
        handle.respond_elicitation(
            pending.round_id,
            {key: ElicitationResponse(action="accept", content={**VALID, "email": "not-an-email"})},
            idempotency_key="details-1",
        )
    fields = {v.field for v in caught.value.field_violations}
    assert fields == {f"responses[{key!r}].content.email"}
    assert handle.pending_elicitation() == pending  # still pending, unchanged

    handle.respond_elicitation(
        pending.round_id,
        {key: ElicitationResponse(action="accept", content=VALID)},
        idempotency_key="details-1",
    )
    result = handle.result(timeout=60)
    assert result.outcome is ExecutionOutcome.SUCCEEDED
    texts = [block["text"] for block in (result.operations[0].result or {})["content"]]
    assert texts[0].startswith("✅ User provided the requested information!")
    assert "ada@example.org" in texts[1]
