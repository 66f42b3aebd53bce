"""@modelcontextprotocol/server-everything over stdio and Streamable HTTP, answered through
the handle API."""

from __future__ import annotations

import pytest

from m3grpc import (
    ElicitationResponse,
    FormElicitationRequest,
    ManagedInputValidationError,
    MCPTestKit,
)
from m3grpc.servers import ServerBinding
from m3grpc.types import ExecutionOutcome
from tests.runtime.conftest import wait_pending
from tests.support.everything import TRANSPORTS, VALID_ANSWER, Transport, everything_binding

VALID = VALID_ANSWER


@pytest.mark.node
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_everything_form_elicitation_with_invalid_answer_first(
    kit: MCPTestKit, transport: Transport
) -> None:
    with everything_binding(transport) as everything:
        run_form_elicitation(kit, everything)


def run_form_elicitation(kit: MCPTestKit, everything: ServerBinding) -> None:
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
