"""Managed elicitation end to end: real MCP servers, real SQLite, the seed's API."""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import timedelta

import pytest

from m3grpc import (
    AsyncMCPTestKit,
    ElicitationResponse,
    FormElicitationRequest,
    HttpServer,
    ManagedInputStateError,
    ManagedInputValidationError,
    MCPTestKit,
    UrlElicitationRequest,
)
from m3grpc.errors import ModelValidationError, OperationTimeout, ResultWaitTimeout
from m3grpc.kit import AsyncExecutionHandle, ExecutionHandle
from m3grpc.servers import ServerBinding
from m3grpc.storage import SQLiteExecutionStore
from m3grpc.submit_options import RespondOutcome
from m3grpc.types import (
    ExecutionOutcome,
    ExecutionStatus,
    ManagedInputLease,
    ManagedInputStatus,
    PendingElicitationRound,
)
from tests.runtime.conftest import (
    SHIPPING_PROMPT,
    eventually,
    mcp_server,
    submit_tool,
    text_of,
    wait_pending,
)
from tests.support.mcp_processes import http_mcp_server

ADDRESS = ElicitationResponse(action="accept", content={"street": "1 Main Street", "city": "Pune"})
PROMPT = SHIPPING_PROMPT


@pytest.mark.parametrize("variant", ["legacy", "mrtr"])
def test_seed_program(kit: MCPTestKit, store: SQLiteExecutionStore, variant: str) -> None:
    handle = submit_tool(kit, "shipping:book_shipment", variant=variant)
    pending = wait_pending(handle)
    assert handle.snapshot().lifecycle is ExecutionStatus.WAITING_FOR_INPUT
    assert pending.execution_id == handle.execution_id
    assert (pending.server, pending.operation_kind, pending.operation_name) == (
        "shipping",
        "tool",
        "book_shipment",
    )
    assert list(pending.requests) == ["shipping_address"]
    request = pending.requests["shipping_address"]
    assert isinstance(request, FormElicitationRequest)
    assert set(request.requested_schema["properties"]) == {"street", "city"}
    if variant == "mrtr":
        assert pending.request_state
    handle.respond_elicitation(
        pending.round_id,
        {"shipping_address": ADDRESS},
        idempotency_key=f"address-{pending.round_id}",
    )
    result = handle.result(timeout=120)
    assert result.outcome is ExecutionOutcome.SUCCEEDED
    assert text_of(result.operations[0].result) == "booked shipment to 1 Main Street, Pune"
    record = store.managed_input_store.get_round(pending.round_id)
    assert record.status is ManagedInputStatus.RESOLVED
    assert record.delivery_attempts == 1
    assert record.idempotency_key == f"address-{pending.round_id}"
    assert handle.pending_elicitation() is None
    assert handle.snapshot().lifecycle is ExecutionStatus.FINISHED


@pytest.mark.parametrize("action", ["decline", "cancel"])
def test_decline_and_cancel_actions(kit: MCPTestKit, action: str) -> None:
    handle = submit_tool(kit, "shipping:book_shipment")
    pending = wait_pending(handle)
    handle.respond_elicitation(
        pending.round_id,
        {"shipping_address": ElicitationResponse(action=action)},  # type: ignore[arg-type]
        idempotency_key="k",
    )
    result = handle.result(timeout=60)
    words = {"decline": "declined", "cancel": "cancelled"}
    assert text_of(result.operations[0].result) == f"shipment not booked: {words[action]}"


def test_invalid_response_leaves_round_pending_then_valid_one_wins(kit: MCPTestKit) -> None:
    handle = submit_tool(kit, "shipping:book_shipment", variant="mrtr")
    pending = wait_pending(handle)
    with pytest.raises(ManagedInputValidationError) as caught:
        handle.respond_elicitation(
            pending.round_id,
            {"shipping_address": ElicitationResponse(action="accept", content={"street": "x"})},
            idempotency_key="k",
        )
    assert any(v.field.endswith(".content") for v in caught.value.field_violations)
    assert handle.pending_elicitation() == pending
    with pytest.raises(ManagedInputValidationError):
        handle.respond_elicitation(pending.round_id, {"wrong_key": ADDRESS}, idempotency_key="k")
    with pytest.raises(ManagedInputValidationError):
        handle.respond_elicitation("", {"shipping_address": ADDRESS}, idempotency_key="k")
    with pytest.raises(ManagedInputValidationError):
        handle.respond_elicitation(
            pending.round_id, {"shipping_address": ADDRESS}, idempotency_key=""
        )
    answer = {"shipping_address": ADDRESS}
    outcome = handle.respond_elicitation(pending.round_id, answer, idempotency_key="k")
    assert outcome == RespondOutcome(
        pending.round_id, ManagedInputStatus.RESPONSE_VALIDATED, replayed=False
    )
    # A retry after a lost acknowledgement reuses key and response: accepted as a replay.
    outcome = handle.respond_elicitation(pending.round_id, answer, idempotency_key="k")
    assert outcome.round_id == pending.round_id and outcome.replayed
    assert handle.result(timeout=60).outcome is ExecutionOutcome.SUCCEEDED


def test_two_rounds_in_one_operation(kit: MCPTestKit, store: SQLiteExecutionStore) -> None:
    handle = submit_tool(
        kit, "shipping:book_confirmed_shipment", variant="mrtr", prompt="Book with confirmation"
    )
    first = wait_pending(handle)
    handle.respond_elicitation(first.round_id, {"shipping_address": ADDRESS}, idempotency_key="a")

    def next_round() -> PendingElicitationRound | None:
        pending = handle.pending_elicitation()
        return pending if pending is not None and pending.round_id != first.round_id else None

    second = eventually(next_round, what="the second round")
    records = {
        r.round_id: r
        for r in store.managed_input_store.list_rounds(execution_id=handle.execution_id)
    }
    assert records[first.round_id].round_index == 0
    assert records[first.round_id].status is ManagedInputStatus.RESOLVED
    assert records[second.round_id].round_index == 1
    assert second.logical_operation_id == first.logical_operation_id
    (key,) = second.requests
    request = second.requests[key]
    assert isinstance(request, FormElicitationRequest)
    content = {name: True for name in request.requested_schema.get("required", [])}
    handle.respond_elicitation(
        second.round_id,
        {key: ElicitationResponse(action="accept", content=content)},
        idempotency_key="b",
    )
    result = handle.result(timeout=60)
    assert result.outcome is ExecutionOutcome.SUCCEEDED, result


def test_url_mode_accept_records_consent(kit: MCPTestKit) -> None:
    handle = submit_tool(kit, "payment:authorize_payment", prompt="Pay")
    pending = wait_pending(handle)
    ((key, request),) = pending.requests.items()
    assert isinstance(request, UrlElicitationRequest)
    assert request.url == "https://pay.example.test/authorize"
    with pytest.raises(ManagedInputValidationError):
        handle.respond_elicitation(
            pending.round_id,
            {key: ElicitationResponse(action="accept", content={"card": "4111"})},
            idempotency_key="k",
        )
    handle.respond_elicitation(
        pending.round_id, {key: ElicitationResponse(action="accept")}, idempotency_key="k"
    )
    result = handle.result(timeout=60)
    assert text_of(result.operations[0].result) == "payment authorized: 10.0"


def test_round_deadline_expiry_fails_round_and_operation(
    kit: MCPTestKit, store: SQLiteExecutionStore
) -> None:
    handle = submit_tool(kit, "shipping:book_shipment", round_timeout_seconds=1.0)
    pending = wait_pending(handle)
    assert pending.deadline is not None and pending.deadline > pending.created_at
    result = handle.result(timeout=60)
    assert result.outcome is ExecutionOutcome.FAILED
    assert result.failure_code == OperationTimeout.reason.lower()
    record = store.managed_input_store.get_round(pending.round_id)
    assert record.status is ManagedInputStatus.FAILED
    assert record.failure_code == "operation_timeout"
    with pytest.raises(ManagedInputStateError):
        handle.respond_elicitation(
            pending.round_id, {"shipping_address": ADDRESS}, idempotency_key="late"
        )


def test_cancel_while_pending(kit: MCPTestKit, store: SQLiteExecutionStore) -> None:
    handle = submit_tool(kit, "shipping:book_shipment")
    pending = wait_pending(handle)
    handle.cancel()
    result = handle.result(timeout=60)
    assert result.outcome is ExecutionOutcome.CANCELLED
    # The call cut short is listed, failed with the cancel's reason.
    [operation] = result.operations
    assert (operation.operation_name, operation.ok) == ("book_shipment", False)
    assert operation.logical_operation_id == pending.logical_operation_id
    assert operation.failure_code == "cancelled"
    record = store.managed_input_store.get_round(pending.round_id)
    assert record.status is ManagedInputStatus.FAILED and record.failure_code == "cancelled"
    with pytest.raises(ManagedInputStateError):
        handle.respond_elicitation(
            pending.round_id, {"shipping_address": ADDRESS}, idempotency_key="late"
        )
    handle.cancel()  # idempotent
    assert handle.snapshot().outcome is ExecutionOutcome.CANCELLED


def test_a_cancel_keeps_what_the_operations_before_it_returned(kit: MCPTestKit) -> None:
    # Cancelled while its second operation waits for input: the first one's result,
    # stored as it finished, is in the Result, as recovery would report it.
    agent = kit.agents([{"harness": "scripted", "models": []}])[0]
    handle = agent.submit(
        "Quote, then book",
        server=mcp_server("shipping", "legacy"),
        tools=["shipping:quote", "shipping:book_shipment"],
        script=[
            {"kind": "tool", "name": "quote", "arguments": {"weight_kg": 1.0}},
            {"kind": "tool", "name": "book_shipment"},
        ],
        human_input="managed",
    )
    wait_pending(handle)
    handle.cancel()
    result = handle.result(timeout=60)
    assert result.outcome is ExecutionOutcome.CANCELLED
    assert [(op.operation_name, op.ok, op.failure_code) for op in result.operations] == [
        ("quote", True, None),
        ("book_shipment", False, "cancelled"),
    ]


def test_result_wait_timeout_is_typed(kit: MCPTestKit) -> None:
    handle = submit_tool(kit, "shipping:book_shipment")
    wait_pending(handle)
    started = time.monotonic()
    with pytest.raises(ResultWaitTimeout) as caught:
        handle.result(timeout=0.3)
    assert isinstance(caught.value, OperationTimeout)
    assert time.monotonic() - started < 30  # it returned; the execution keeps waiting
    assert handle.snapshot().lifecycle is ExecutionStatus.WAITING_FOR_INPUT
    # NaN is no timeout (it used to wait without ever giving up): refused, typed.
    for wait in (handle.result, handle.wait_for_pending):
        with pytest.raises(ModelValidationError):
            wait(timeout=float("nan"))
    # Infinity is no limit: the round already pending comes back.
    assert handle.wait_for_pending(timeout=float("inf")) is not None
    handle.cancel()


def test_pending_elicitation_raises_when_storage_holds_two(
    kit: MCPTestKit, store: SQLiteExecutionStore
) -> None:
    # Two pending rounds for one execution can only come from outside the
    # runtime (the store's own API); the handle must refuse to pick one.
    execution_id = store.create_execution(
        {"kind": "noop"}, human_input="managed"
    ).state.execution_id
    lease = ManagedInputLease(
        owner_id="w", lease_token="t", expires_at=store.now() + timedelta(minutes=5)
    )
    for index in range(2):
        store.managed_input_store.create_round(
            PendingElicitationRound(
                round_id=f"rnd_{index}",
                execution_id=execution_id,
                logical_operation_id=f"op-{index}",
                server="s",
                operation_kind="tool",
                operation_name="t",
                created_at=store.now(),
                requests={"k": FormElicitationRequest(message="m", requested_schema={})},
            ),
            lease=lease,
        )
    handle = ExecutionHandle(
        kit._loop_thread(), AsyncExecutionHandle(kit._async_kit.runtime, execution_id)
    )
    with pytest.raises(ManagedInputStateError):
        handle.pending_elicitation()


async def test_async_kit_seed_flow(store: SQLiteExecutionStore) -> None:
    async with AsyncMCPTestKit(store=store, env={}, poll_interval=0.2) as kit:
        agent = kit.agents([{"harness": "scripted", "models": []}])[0]
        handle = await agent.submit(
            PROMPT,
            server=mcp_server("shipping", "mrtr"),
            tools=["shipping:book_shipment"],
            human_input="managed",
        )
        pending = None
        for _ in range(600):
            pending = await handle.pending_elicitation()
            if pending is not None:
                break
            await asyncio.sleep(0.05)
        assert pending is not None
        await handle.respond_elicitation(
            pending.round_id, {"shipping_address": ADDRESS}, idempotency_key="k"
        )
        result = await handle.result(timeout=60)
        assert result.outcome is ExecutionOutcome.SUCCEEDED
        assert (await handle.snapshot()).lifecycle is ExecutionStatus.FINISHED


@pytest.mark.parametrize("variant", ["legacy", "mrtr"])
def test_prompt_and_resource_rounds(
    kit: MCPTestKit, store: SQLiteExecutionStore, variant: str
) -> None:
    agent = kit.agents([{"harness": "scripted", "models": []}])[0]
    handle = agent.submit(
        "Render the label and read the address",
        server=mcp_server("shipping", variant),
        script=[
            {"kind": "prompt", "name": "shipping_label"},
            {"kind": "resource", "name": "shipment://S-1/address"},
        ],
        human_input="managed",
    )
    kinds = []
    for _ in range(2):
        seen = {
            r.round_id
            for r in store.managed_input_store.list_rounds(
                execution_id=handle.execution_id, statuses=[ManagedInputStatus.RESOLVED]
            )
        }

        def fresh(seen: set[str] = seen) -> PendingElicitationRound | None:
            pending = handle.pending_elicitation()
            return pending if pending is not None and pending.round_id not in seen else None

        pending = eventually(fresh, what="a prompt/resource round")
        kinds.append((pending.operation_kind, pending.operation_name))
        (key,) = pending.requests
        handle.respond_elicitation(
            pending.round_id, {key: ADDRESS}, idempotency_key=pending.round_id
        )
        eventually(
            lambda p=pending: (
                True
                if store.managed_input_store.get_round(p.round_id).status
                is ManagedInputStatus.RESOLVED
                else None
            ),
            what="resolution",
        )
    assert kinds == [("prompt", "shipping_label"), ("resource", "shipment://S-1/address")]
    result = handle.result(timeout=60)
    assert result.outcome is ExecutionOutcome.SUCCEEDED, result
    assert "1 Main Street" in text_of(result.operations[0].result)
    assert "1 Main Street" in text_of(result.operations[1].result)


@pytest.mark.parametrize("variant", ["legacy", "mrtr"])
def test_round_limit_exceeded_fails_the_operation(
    kit: MCPTestKit, store: SQLiteExecutionStore, variant: str
) -> None:
    handle = submit_tool(
        kit, "shipping:keep_asking", variant=variant, prompt="Keep answering", round_limit=2
    )
    answered: list[str] = []
    for _ in range(2):

        def fresh() -> PendingElicitationRound | None:
            pending = handle.pending_elicitation()
            return pending if pending is not None and pending.round_id not in answered else None

        pending = eventually(fresh, what="a keep_asking round")
        (key,) = pending.requests
        handle.respond_elicitation(
            pending.round_id,
            {key: ElicitationResponse(action="accept", content={"answer": "yes"})},
            idempotency_key=pending.round_id,
        )
        answered.append(pending.round_id)
    result = handle.result(timeout=60)
    assert result.outcome is ExecutionOutcome.FAILED
    assert result.failure_code == "round_limit_exceeded"
    records = store.managed_input_store.list_rounds(execution_id=handle.execution_id)
    assert [(r.round_index, r.round_limit) for r in records] == [(0, 2), (1, 2)]
    assert [r.status for r in records] == [ManagedInputStatus.RESOLVED] * 2


@pytest.mark.parametrize(
    ("variant", "transport", "commits_expected"),
    [("legacy", "stdio", 3), ("mrtr", "stdio", 3), ("mrtr", "http", 2)],
)
def test_the_last_round_resolves_in_the_finish_commit(
    store: SQLiteExecutionStore, variant: str, transport: str, commits_expected: int
) -> None:
    """From the round's pending to the result: the answer, which also starts its
    delivery (the worker waits here with a free slot), then the finish. On a shared
    2026-07-28 HTTP session the finish resolves the last round in its own
    transaction (two commits); an execution's own connection resolves it first, as
    the connection's close takes a while and a crash meanwhile must still find the
    operation's result (three: tests/api/test_round_status.py). Before, each of the
    four committed on its own."""
    # A long lease: no heartbeat renewal lands between (it appends no event anyway).
    with contextlib.ExitStack() as servers:
        if transport == "http":
            url = servers.enter_context(http_mcp_server("shipping", variant))
            server: ServerBinding = HttpServer(name="shipping", url=url, protocol="2026-07-28")
        else:
            server = mcp_server("shipping", variant)
        with MCPTestKit(store=store, env={}, lease_seconds=600) as kit:
            agent = kit.agents([{"harness": "scripted", "models": []}])[0]
            handle = agent.submit(
                SHIPPING_PROMPT,
                server=server,
                tools=["shipping:book_shipment"],
                human_input="managed",
            )
            pending = wait_pending(handle)
            # The round can be read before its worker waits on it (under load): the
            # answer starts its delivery only once the worker waits.
            runtime = kit._async_kit.runtime
            deadline = time.monotonic() + 60
            while runtime.waiting_executions == 0 and time.monotonic() < deadline:
                time.sleep(0.005)
            commits: list[None] = []
            store.add_events_listener(lambda: commits.append(None))
            handle.respond_elicitation(
                pending.round_id, {"shipping_address": ADDRESS}, idempotency_key="address"
            )
            result = handle.result(timeout=120)
            assert result.outcome is ExecutionOutcome.SUCCEEDED
            assert len(commits) == commits_expected
    record = store.managed_input_store.get_round(pending.round_id)
    assert record.status is ManagedInputStatus.RESOLVED and record.delivered_at is not None
    assert record.delivery_attempts == 1
    assert store.operation_results(handle.execution_id) == list(result.operations)
    events = store.read_events(after_seq=0, execution_id=handle.execution_id)
    assert [(e.kind.value, e.status) for e in events][-2:] == [
        ("round_changed", "resolved"),
        ("execution_finished", "succeeded"),
    ]
