"""human_input="fail": elicitations are answered from the plan or fail the operation."""

from __future__ import annotations

import pytest

from m3grpc import MCPTestKit
from m3grpc.errors import ElicitationNotAnsweredError
from m3grpc.storage import SQLiteExecutionStore
from m3grpc.types import ExecutionOutcome
from tests.runtime.conftest import mcp_server, text_of

PROMPT = "Book the shipment."


@pytest.mark.parametrize("variant", ["legacy", "mrtr"])
def test_plan_answers_with_content(
    kit: MCPTestKit, store: SQLiteExecutionStore, variant: str
) -> None:
    agent = kit.agents([{"harness": "scripted", "models": []}])[0]
    handle = agent.submit(
        PROMPT,
        server=mcp_server("shipping", variant),
        tools=["shipping:book_shipment"],
        elicitation_plan={
            "rules": [
                {
                    "operation_name": "book_shipment",
                    "action": "accept",
                    "content": {"street": "2 Side Road", "city": "Goa"},
                }
            ]
        },
    )
    result = handle.result(timeout=60)
    assert result.outcome is ExecutionOutcome.SUCCEEDED
    assert text_of(result.operations[0].result) == "booked shipment to 2 Side Road, Goa"
    # Plan answers never become managed rounds.
    assert store.managed_input_store.list_rounds(execution_id=handle.execution_id) == []


def test_plan_decline(kit: MCPTestKit) -> None:
    agent = kit.agents([{"harness": "scripted", "models": []}])[0]
    handle = agent.submit(
        PROMPT,
        server=mcp_server("shipping"),
        tools=["shipping:book_shipment"],
        elicitation_plan={"rules": [{"message_contains": "", "action": "decline"}]},
    )
    result = handle.result(timeout=60)
    assert text_of(result.operations[0].result) == "shipment not booked: declined"


@pytest.mark.parametrize("variant", ["legacy", "mrtr"])
def test_unanswered_elicitation_fails_the_operation(kit: MCPTestKit, variant: str) -> None:
    agent = kit.agents([{"harness": "scripted", "models": []}])[0]
    handle = agent.submit(
        PROMPT, server=mcp_server("shipping", variant), tools=["shipping:book_shipment"]
    )
    result = handle.result(timeout=60)
    assert result.outcome is ExecutionOutcome.FAILED
    assert result.failure_code == ElicitationNotAnsweredError.reason.lower()
    assert result.operations[0].ok is False
    assert "shipping_address" in (result.operations[0].failure_message or "")


def test_plan_that_misses_the_operation_fails_it(kit: MCPTestKit) -> None:
    agent = kit.agents([{"harness": "scripted", "models": []}])[0]
    handle = agent.submit(
        PROMPT,
        server=mcp_server("shipping"),
        tools=["shipping:book_shipment"],
        elicitation_plan={"rules": [{"operation_name": "other_tool", "action": "decline"}]},
    )
    result = handle.result(timeout=60)
    assert result.failure_code == "elicitation_not_answered"


def test_operation_spec_runs_one_operation(kit: MCPTestKit) -> None:
    handle = kit.submit(
        {
            "kind": "operation",
            "server": mcp_server("shipping").model_dump(),
            "operation": {"kind": "tool", "name": "quote", "arguments": {"weight_kg": 4}},
        }
    )
    result = handle.result(timeout=60)
    assert result.outcome is ExecutionOutcome.SUCCEEDED
    assert text_of(result.operations[0].result) == "quote for 4.0 kg"
