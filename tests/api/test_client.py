"""The Python remote client: the seed program unchanged but for how the kit is
built, typed errors rebuilt from the status details, and typed watch events."""

from __future__ import annotations

import time
from typing import Any

import pytest

from m3grpc.client import (
    AsyncRemoteMCPTestKit,
    ExecutionFinished,
    RemoteMCPTestKit,
    RoundLeftPending,
    RoundPending,
)
from m3grpc.errors import (
    ConflictKind,
    ExecutionNotFoundError,
    ManagedInputConflict,
    ManagedInputStateError,
    ManagedInputValidationError,
    ModelValidationError,
    ResultWaitTimeout,
    RoundNotFoundError,
    ServerBindingNotFoundError,
)
from m3grpc.servers import StdioServer
from m3grpc.specs import AgentSpec
from m3grpc.types import (
    ElicitationResponse,
    ExecutionOutcome,
    ExecutionStatus,
    FormElicitationRequest,
    ManagedInputStatus,
)

from .conftest import ADDRESS, BOOKED, ServerProcess

# Only the binding's name goes on the wire; the service decides what it runs.
shipping_server = StdioServer(name="shipping", command="never-sent-to-the-service")


def test_seed_program_runs_unchanged(shared_server: ServerProcess) -> None:
    with RemoteMCPTestKit(shared_server.address) as kit:
        agent = kit.agents([{"harness": "scripted", "models": []}])[0]
        handle = agent.submit(
            "Ask for the delivery address, then book the shipment.",
            server=shipping_server,
            tools=["shipping:book_shipment"],
            human_input="managed",
        )
        deadline = time.monotonic() + 120
        pending = handle.pending_elicitation()
        while pending is None and time.monotonic() < deadline:
            snapshot = handle.snapshot()
            if snapshot.lifecycle is ExecutionStatus.FINISHED:
                raise RuntimeError(
                    f"execution finished before it requested managed input: {snapshot.outcome}"
                )
            time.sleep(0.2)
            pending = handle.pending_elicitation()
        if pending is None:
            raise TimeoutError("execution did not request managed input")
        handle.respond_elicitation(
            pending.round_id,
            {
                "shipping_address": ElicitationResponse(
                    action="accept", content={"street": "1 Main Street", "city": "Pune"}
                )
            },
            idempotency_key=f"address-{pending.round_id}",
        )
        result = handle.result(timeout=120)
    assert result.outcome is ExecutionOutcome.SUCCEEDED
    assert result.operations[0].result is not None
    assert result.operations[0].result["structuredContent"]["result"] == BOOKED
    assert isinstance(pending.requests["shipping_address"], FormElicitationRequest)
    assert pending.execution_id == handle.execution_id


def test_typed_errors(shared_server: ServerProcess) -> None:
    with RemoteMCPTestKit(shared_server.address) as kit:
        agent = kit.agents([{"harness": "scripted"}])[0]
        handle = agent.submit(
            "p", server="shipping", tools=["shipping:book_shipment"], human_input="managed"
        )
        pending = None
        for _ in range(600):
            pending = handle.pending_elicitation()
            if pending is not None:
                break
            time.sleep(0.05)
        assert pending is not None

        with pytest.raises(ResultWaitTimeout) as waited:
            handle.result(timeout=0.2)
        assert isinstance(waited.value, TimeoutError)
        assert waited.value.metadata["execution_id"] == handle.execution_id

        with pytest.raises(ManagedInputValidationError) as invalid:
            handle.respond_elicitation(
                pending.round_id,
                {"shipping_address": ElicitationResponse(action="accept", content={"x": 1})},
                idempotency_key="bad",
            )
        assert invalid.value.field_violations
        assert invalid.value.metadata["round_id"] == pending.round_id
        # A malformed map is refused before it leaves, with the error and the path
        # spelling the service and the embedded handle give.
        with pytest.raises(ManagedInputValidationError) as malformed:
            handle.respond_elicitation(
                pending.round_id, {"shipping_address": {"action": "maybe"}}, idempotency_key="m"
            )
        assert [v.field for v in malformed.value.field_violations] == [
            "responses['shipping_address'].action"
        ]
        # A handle answers only its own execution's rounds, as the embedded one does.
        with pytest.raises(ManagedInputValidationError) as elsewhere:
            kit.handle("exe_other").respond_elicitation(
                pending.round_id,
                {"shipping_address": ElicitationResponse(action="decline")},
                idempotency_key="wrong-handle",
            )
        assert [v.field for v in elsewhere.value.field_violations] == ["round_id"]

        answer = {"shipping_address": ElicitationResponse(action="accept", content=ADDRESS)}
        handle.respond_elicitation(pending.round_id, answer, idempotency_key="good")
        handle.respond_elicitation(pending.round_id, answer, idempotency_key="good")  # replay
        with pytest.raises(ManagedInputConflict) as conflict:
            handle.respond_elicitation(
                pending.round_id,
                {"shipping_address": ElicitationResponse(action="decline")},
                idempotency_key="good",
            )
        assert conflict.value.conflict_kind is ConflictKind.IDEMPOTENCY_KEY_REUSED
        with pytest.raises(ManagedInputStateError) as state:
            handle.respond_elicitation(pending.round_id, answer, idempotency_key="other")
        assert not isinstance(state.value, RoundNotFoundError)
        with pytest.raises(RoundNotFoundError):
            handle.respond_elicitation("rnd_missing", answer, idempotency_key="k")
        with pytest.raises(ExecutionNotFoundError) as missing:
            kit.handle("exe_missing").snapshot()
        assert missing.value.metadata == {"execution_id": "exe_missing"}
        with pytest.raises(ServerBindingNotFoundError):
            agent.submit("p", server="no-such-binding")
        with pytest.raises(ModelValidationError):
            agent.submit("p", server="shipping", human_input="sometimes")  # type: ignore[arg-type]
        with pytest.raises(ModelValidationError) as bad_tools:
            agent.submit("p", server="shipping", tools=["elsewhere:tool"])
        assert [v.field for v in bad_tools.value.field_violations] == ["agent.tools[0]"]
        assert handle.result(timeout=60).outcome is ExecutionOutcome.SUCCEEDED


def test_arguments_are_checked_as_the_embedded_api_checks_them() -> None:
    # Refused before anything is sent (nothing listens there), with the embedded
    # kit's typed errors and field paths, not accepted, defaulted or a TypeError.
    with RemoteMCPTestKit("127.0.0.1:1", timeout=5) as kit:
        for configs, fields in (
            ([{"models": []}], ["agents[0].harness"]),
            ([{"harness": "scripted", "models": "abc"}], ["agents[0].models"]),
        ):
            with pytest.raises(ModelValidationError) as bad_config:
                kit.agents(configs)
            assert [v.field for v in bad_config.value.field_violations] == fields
        agent = kit.agents([{"harness": "scripted", "models": []}])[0]
        for arguments, field in (
            ({"prompt": None}, "prompt"),
            ({"tools": [5]}, "tools[0]"),
            ({"round_timeout_seconds": float("nan")}, "round_timeout_seconds"),
            ({"round_timeout_seconds": float("inf")}, "round_timeout_seconds"),
        ):
            submitted: dict[str, Any] = {"prompt": "p", "server": "shipping", **arguments}
            with pytest.raises(ModelValidationError) as bad_argument:
                agent.submit(submitted.pop("prompt"), **submitted)
            assert [v.field for v in bad_argument.value.field_violations] == [field]


def test_spec_submission_and_watch_events(shared_server: ServerProcess) -> None:
    spec = AgentSpec(
        prompt="p", server=shipping_server, tools=["shipping:book_shipment"], round_limit=2
    )
    with RemoteMCPTestKit(shared_server.address) as kit:
        handle = kit.submit(spec, "managed", request_id="client-spec-1")
        assert kit.submit(spec, "managed", request_id="client-spec-1").execution_id == (
            handle.execution_id
        )
        events = handle.watch_pending()
        first = next(events)
        assert isinstance(first, RoundPending)
        assert (first.round_index, first.round_limit) == (0, 2)
        assert first.round.execution_id == handle.execution_id
        handle.respond_elicitation(
            first.round.round_id,
            {"shipping_address": {"action": "decline"}},
            idempotency_key="decline",
        )
        rest = list(events)  # ends after the execution finishes
        assert isinstance(rest[0], RoundLeftPending)
        assert rest[0].status is ManagedInputStatus.RESPONSE_VALIDATED
        assert isinstance(rest[-1], ExecutionFinished)
        assert rest[-1].state.lifecycle is ExecutionStatus.FINISHED
        # Resuming from the first event replays the same events.
        assert [type(e) for e in handle.watch_pending(cursor=first.cursor)] == [
            type(e) for e in rest
        ]
        # ... and with `kinds`, only the events of those classes.
        assert [
            type(e) for e in handle.watch_pending(cursor=first.cursor, kinds=[ExecutionFinished])
        ] == [ExecutionFinished]
        with pytest.raises(TypeError, match="not a WatchPending event class"):
            next(kit.watch_pending(kinds=[ElicitationResponse]))  # type: ignore[list-item]
        result = handle.result(timeout=60)
        assert result.operations[0].result is not None
        assert "declined" in str(result.operations[0].result)


async def test_async_client(shared_server: ServerProcess) -> None:
    async with AsyncRemoteMCPTestKit(shared_server.address) as kit:
        agent = kit.agents([{"harness": "scripted", "models": []}])[0]
        handle = await agent.submit(
            "p", server=shipping_server, tools=["shipping:book_shipment"], human_input="managed"
        )
        events = handle.watch_pending(kinds=[RoundPending, ExecutionFinished])
        first = await anext(events)
        assert isinstance(first, RoundPending)
        pending = await handle.pending_elicitation()
        assert pending is not None and pending.round_id == first.round.round_id
        await handle.respond_elicitation(
            pending.round_id,
            {"shipping_address": ElicitationResponse(action="accept", content=ADDRESS)},
            idempotency_key="async",
        )
        rest = [event async for event in events]
        assert [type(event) for event in rest] == [ExecutionFinished]  # no RoundLeftPending
        result = await handle.result(timeout=60)
        assert result.outcome is ExecutionOutcome.SUCCEEDED
        assert (await handle.snapshot()).outcome is ExecutionOutcome.SUCCEEDED
        await handle.cancel()  # idempotent on a finished execution
        with pytest.raises(ExecutionNotFoundError):
            await kit.handle("exe_missing").result(timeout=1)


def test_rounds_by_id_and_by_page(shared_server: ServerProcess) -> None:
    with RemoteMCPTestKit(shared_server.address) as kit:
        handle = kit.agents([{"harness": "scripted", "models": []}])[0].submit(
            "p", server=shipping_server, tools=["shipping:book_shipment"], human_input="managed"
        )
        first = next(e for e in handle.watch_pending() if isinstance(e, RoundPending))
        round_id = first.round.round_id
        asked = kit.get_round(round_id)
        assert asked.status is ManagedInputStatus.PENDING
        assert asked.execution_id == handle.execution_id and asked.responses is None
        assert asked.requests == first.round.requests
        assert asked.round_index == 0 and asked.resolved_at is None
        waiting = kit.list_rounds(execution_id=handle.execution_id, statuses=["pending"])
        assert [view.round_id for view in waiting.rounds] == [round_id]

        handle.respond_elicitation(
            round_id,
            {"shipping_address": ElicitationResponse(action="accept", content=ADDRESS)},
            idempotency_key="rounds-view",
        )
        assert handle.result(timeout=120).outcome is ExecutionOutcome.SUCCEEDED
        answered = kit.get_round(round_id)
        assert answered.status is ManagedInputStatus.RESOLVED
        assert answered.resolved_at is not None and answered.delivery_attempts == 1
        assert answered.responses is not None
        assert answered.responses.idempotency_key == "rounds-view"
        assert dict(answered.responses.actions) == {"shipping_address": "accept"}
        assert sorted(answered.responses.content_keys["shipping_address"]) == ["city", "street"]
        assert ADDRESS["city"] not in answered.model_dump_json()  # redacted: no content values

        page = kit.list_rounds(execution_id=handle.execution_id, page_size=1)
        assert page.rounds == (answered,) and page.next_page_token is None
        still_pending = kit.list_rounds(
            execution_id=handle.execution_id, statuses=[ManagedInputStatus.PENDING]
        )
        assert still_pending.rounds == ()
        with pytest.raises(RoundNotFoundError):
            kit.get_round("rnd_missing")
        with pytest.raises(ManagedInputValidationError):
            kit.list_rounds(page_size=-1)


async def test_async_rounds_match_the_sync_ones(shared_server: ServerProcess) -> None:
    with RemoteMCPTestKit(shared_server.address) as kit:
        handle = kit.agents([{"harness": "scripted", "models": []}])[0].submit(
            "p", server=shipping_server, tools=["shipping:book_shipment"], human_input="managed"
        )
        first = next(e for e in handle.watch_pending() if isinstance(e, RoundPending))
        expected = kit.get_round(first.round.round_id)
    async with AsyncRemoteMCPTestKit(shared_server.address) as remote:
        assert await remote.get_round(expected.round_id) == expected
        page = await remote.list_rounds(execution_id=expected.execution_id)
        assert page.rounds == (expected,)
        with pytest.raises(RoundNotFoundError):
            await remote.get_round("rnd_missing")
        await remote.handle(expected.execution_id).cancel()
