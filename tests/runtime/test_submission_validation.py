"""Every ModelValidationError case at submission; a rejected submission stores nothing."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from m3grpc import MCPTestKit, ModelValidationError
from m3grpc.storage import EphemeralExecutionStore, SQLiteExecutionStore
from tests.runtime.conftest import mcp_server

SHIPPING = mcp_server("shipping")
PLAN = {"rules": [{"action": "decline"}]}


def _agent_submit(**overrides: object) -> Callable[[MCPTestKit], object]:
    def submit(kit: MCPTestKit) -> object:
        agent = kit.agents([{"harness": "scripted", "models": []}])[0]
        arguments: dict[str, object] = {
            "server": SHIPPING,
            "tools": ["shipping:book_shipment"],
            "human_input": "managed",
        }
        arguments.update(overrides)
        return agent.submit("Book it.", **arguments)  # type: ignore[arg-type]

    return submit


CASES: dict[str, tuple[Callable[[MCPTestKit], object], str]] = {
    "invalid-human-input": (_agent_submit(human_input="sometimes"), "human_input"),
    "managed-with-plan": (_agent_submit(elicitation_plan=PLAN), "elicitation_plan"),
    "managed-operation-spec": (
        lambda kit: kit.submit(
            {
                "kind": "operation",
                "server": SHIPPING.model_dump(),
                "operation": {"kind": "tool", "name": "book_shipment"},
            },
            human_input="managed",
        ),
        "spec",
    ),
    "unknown-harness": (
        lambda kit: kit.agents([{"harness": "no-such-harness", "models": ["m"]}])[0].submit(
            "x", server=SHIPPING, tools=["shipping:book_shipment"]
        ),
        "harness",
    ),
    "tool-of-another-server": (_agent_submit(tools=["billing:charge"]), "tools[0]"),
    "malformed-tool-entry": (_agent_submit(tools=["book_shipment"]), "tools[0]"),
    "invalid-round-limit": (_agent_submit(round_limit=0), "round_limit"),
    # A deadline past what a datetime can hold would overflow when the round is made.
    "round-timeout-too-long": (
        _agent_submit(round_timeout_seconds=315_576_000_000.0),
        "round_timeout_seconds",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_invalid_submission_is_rejected_and_stores_nothing(
    kit: MCPTestKit, store: SQLiteExecutionStore, case: str
) -> None:
    submit, field = CASES[case]
    with pytest.raises(ModelValidationError) as caught:
        submit(kit)
    assert field in [v.field for v in caught.value.field_violations], caught.value
    assert caught.value.reason == "MODEL_VALIDATION_FAILED"
    assert store.count_queued() == 0 and store.last_event_seq() == 0


def test_managed_needs_a_persistent_store() -> None:
    store = EphemeralExecutionStore()
    try:
        with MCPTestKit(store=store) as kit:
            with pytest.raises(ModelValidationError) as caught:
                _agent_submit()(kit)
            assert [v.field for v in caught.value.field_violations] == ["store"]
            # The default human_input="fail" still works on a non-persistent store.
            agent = kit.agents([{"harness": "scripted", "models": []}])[0]
            handle = agent.submit("quote", server=SHIPPING, tools=["shipping:quote"])
            assert handle.result(timeout=60).outcome.value == "succeeded"
    finally:
        store.close()


def test_kit_without_store_defaults_to_ephemeral() -> None:
    with MCPTestKit() as kit:
        assert kit.store.persistent is False
        with pytest.raises(ModelValidationError):
            _agent_submit()(kit)
