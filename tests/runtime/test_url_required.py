"""URL elicitation required (-32042) through the runtime: a managed round, or the plan."""

from __future__ import annotations

import pytest

from m3grpc import ElicitationResponse, MCPTestKit, UrlElicitationRequest
from m3grpc.servers import ServerBinding
from m3grpc.storage import SQLiteExecutionStore
from m3grpc.types import ExecutionOutcome, ManagedInputStatus
from tests.runtime.conftest import eventually, submit_tool, text_of, wait_pending
from tests.support.everything import TRANSPORTS, Transport, everything_binding


def test_managed_round_accept_retries_the_call(
    kit: MCPTestKit, store: SQLiteExecutionStore
) -> None:
    handle = submit_tool(kit, "url_required:open_vault", prompt="Open the vault.")
    pending = wait_pending(handle)
    [(key, request)] = pending.requests.items()
    assert key == "vault-login"
    assert isinstance(request, UrlElicitationRequest)
    assert (request.url, request.elicitation_id) == (
        "https://vault.example.test/login",
        "vault-login",
    )
    assert (pending.operation_kind, pending.operation_name) == ("tool", "open_vault")
    assert pending.request_state is None

    handle.respond_elicitation(
        pending.round_id, {key: ElicitationResponse(action="accept")}, idempotency_key="login"
    )
    result = handle.result(timeout=60)

    assert result.outcome is ExecutionOutcome.SUCCEEDED, result
    [operation] = result.operations
    assert text_of(operation.result) == "vault main opened"
    assert operation.result is not None
    assert operation.result["_meta"]["m3/elicitation_complete"] == ["vault-login"]
    record = store.managed_input_store.get_round(pending.round_id)
    assert record.status is ManagedInputStatus.RESOLVED


def test_managed_round_decline_fails_the_operation(
    kit: MCPTestKit, store: SQLiteExecutionStore
) -> None:
    handle = submit_tool(kit, "url_required:open_vault", prompt="Open the vault.")
    pending = wait_pending(handle)
    handle.respond_elicitation(
        pending.round_id,
        {"vault-login": ElicitationResponse(action="decline")},
        idempotency_key="no",
    )
    result = handle.result(timeout=60)

    assert result.outcome is ExecutionOutcome.FAILED
    assert result.failure_code == "url_elicitation_declined"
    record = store.managed_input_store.get_round(pending.round_id)
    assert (record.status, record.failure_code) == (
        ManagedInputStatus.FAILED,
        "url_elicitation_declined",
    )


def test_fail_mode_plan_answers_the_error(kit: MCPTestKit) -> None:
    handle = submit_tool(
        kit,
        "url_required:sign_contract",
        prompt="Sign.",
        human_input="fail",
        elicitation_plan={"rules": [{"operation_name": "sign_contract", "action": "accept"}]},
    )
    result = handle.result(timeout=60)
    assert result.outcome is ExecutionOutcome.SUCCEEDED, result
    assert text_of(result.operations[0].result) == "contract signed"


@pytest.mark.parametrize(
    ("plan", "code"),
    [
        (None, "elicitation_not_answered"),
        ({"rules": [{"request_key": "signature", "action": "cancel"}]}, "elicitation_not_answered"),
        ({"rules": [{"message_contains": "", "action": "cancel"}]}, "url_elicitation_cancelled"),
    ],
)
def test_fail_mode_without_consent_fails(
    kit: MCPTestKit, plan: dict[str, object] | None, code: str
) -> None:
    handle = submit_tool(
        kit, "url_required:sign_contract", prompt="Sign.", human_input="fail", elicitation_plan=plan
    )
    result = handle.result(timeout=60)
    assert result.outcome is ExecutionOutcome.FAILED
    assert result.failure_code == code


@pytest.mark.node
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_server_everything_error_path_as_managed_rounds(
    kit: MCPTestKit, store: SQLiteExecutionStore, transport: Transport
) -> None:
    with everything_binding(transport) as everything:
        run_error_path_as_managed_rounds(kit, store, everything)


def run_error_path_as_managed_rounds(
    kit: MCPTestKit, store: SQLiteExecutionStore, everything: ServerBinding
) -> None:
    agent = kit.agents([{"harness": "scripted", "models": []}])[0]
    handle = agent.submit(
        "Start the flow.",
        server=everything,
        tools=["everything:trigger-url-elicitation"],
        script=[
            {
                "kind": "tool",
                "name": "trigger-url-elicitation",
                "arguments": {"url": "https://example.org/start", "errorPath": True},
            }
        ],
        human_input="managed",
    )
    # The -32042 error's prerequisite, then the request-path elicitation of the retry.
    first = wait_pending(handle)
    [(key, prerequisite)] = first.requests.items()
    assert isinstance(prerequisite, UrlElicitationRequest)
    assert prerequisite.url == "https://modelcontextprotocol.io"
    assert key == prerequisite.elicitation_id
    handle.respond_elicitation(
        first.round_id, {key: ElicitationResponse(action="accept")}, idempotency_key="pre"
    )
    second = eventually(
        lambda: p if (p := handle.pending_elicitation()) and p != first else None,
        what="the second round",
    )
    [(key2, request)] = second.requests.items()
    assert isinstance(request, UrlElicitationRequest)
    assert request.url == "https://example.org/start"
    handle.respond_elicitation(
        second.round_id, {key2: ElicitationResponse(action="accept")}, idempotency_key="start"
    )
    result = handle.result(timeout=60)

    assert result.outcome is ExecutionOutcome.SUCCEEDED, result
    assert text_of(result.operations[0].result).startswith("✅ User completed")
    statuses = [store.managed_input_store.get_round(r.round_id).status for r in (first, second)]
    assert statuses == [ManagedInputStatus.RESOLVED, ManagedInputStatus.RESOLVED]
