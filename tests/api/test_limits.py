"""Input limits, black-box: every limit refuses with INVALID_ARGUMENT and a field
violation before anything is stored, and no error echoes unbounded input (the
status travels in trailers, which a 5,000-character echo used to break)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2
from google.rpc import error_details_pb2

from m3grpc.api.config import ConfigError, load_config
from m3grpc.wire.gen.m3.v1 import (
    elicitation_pb2,
    elicitation_service_pb2,
    execution_pb2,
    execution_service_pb2,
)

from .conftest import BOOKED, Failure, Stubs, expect_failure, respond_request

BadRequest = error_details_pb2.BadRequest
LONG = "x" * 5000


def _fields(failure: Failure) -> list[str]:
    return [v.field for v in failure.detail(BadRequest).field_violations]


def _assert_bounded(failure: Failure) -> None:
    """The error is whole (one ErrorInfo, checked by `failure`) and echoes nothing long."""
    assert len(failure.status.message) <= 300
    for key, value in failure.info.metadata.items():
        assert len(key) <= 80 and len(value) <= 80, (key, value)
    assert failure.status.ByteSize() < 4000


def _invalid(failure: Failure, field_suffix: str) -> None:
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT, failure.status
    fields = _fields(failure)
    assert any(f.endswith(field_suffix) for f in fields), fields
    _assert_bounded(failure)


def _agent(**fields: Any) -> execution_pb2.AgentSpec:
    values: dict[str, Any] = {
        "harness": "scripted",
        "server": "shipping",
        "tools": ["shipping:quote"],
        "prompt": "Quote a shipment.",
    }
    values.update(fields)
    return execution_pb2.AgentSpec(**values)


def _submit(stubs: Stubs, agent: execution_pb2.AgentSpec, request_id: str = "") -> Failure:
    return expect_failure(
        stubs.executions.Submit,
        execution_service_pb2.SubmitRequest(agent=agent, request_id=request_id),
        timeout=60,
    )


def _nested(depth: int) -> struct_pb2.Struct:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth):
        value = {"level": value}
    struct = struct_pb2.Struct()
    struct.update(value)
    return struct


@pytest.mark.parametrize(
    ("agent", "field"),
    [
        (_agent(prompt="p" * 100_001), "prompt"),
        (_agent(tools=[f"shipping:tool_{i}" for i in range(1001)]), "tools"),
        (
            _agent(
                script=[
                    execution_pb2.OperationStep(
                        kind=execution_pb2.OPERATION_KIND_TOOL, name="quote"
                    )
                ]
                * 1001
            ),
            "script",
        ),
        (
            _agent(
                script=[
                    execution_pb2.OperationStep(
                        kind=execution_pb2.OPERATION_KIND_TOOL, name="quote", arguments=_nested(24)
                    )
                ]
            ),
            "spec",
        ),
        (
            _agent(
                script=[
                    execution_pb2.OperationStep(
                        kind=execution_pb2.OPERATION_KIND_TOOL,
                        name="quote",
                        arguments=struct_pb2.Struct(
                            fields={"blob": struct_pb2.Value(string_value="b" * 1_100_000)}
                        ),
                    )
                ]
            ),
            "spec",
        ),
    ],
    ids=["prompt", "tools", "script", "depth", "spec-bytes"],
)
def test_spec_limits_refuse_before_storing(
    stubs: Stubs, agent: execution_pb2.AgentSpec, field: str, request: pytest.FixtureRequest
) -> None:
    request_id = f"limits-{request.node.callspec.id}"
    _invalid(_submit(stubs, agent, request_id), field)
    # Nothing was stored: the same request_id now creates an execution (a stored
    # submission under it would make this a REQUEST_ID_REUSED conflict).
    created = stubs.executions.Submit(
        execution_service_pb2.SubmitRequest(agent=_agent(), request_id=request_id), timeout=30
    )
    assert created.execution_id


def test_round_timeout_above_the_maximum_is_refused(stubs: Stubs) -> None:
    agent = _agent()
    agent.round_timeout.FromSeconds(604_801)  # the default maximum is 7 days
    _invalid(_submit(stubs, agent), "agent.round_timeout")


def test_long_request_id_is_refused_with_a_whole_error(stubs: Stubs) -> None:
    _invalid(_submit(stubs, _agent(), request_id=LONG), "request_id")


def test_long_server_name_error_echoes_a_bounded_name(stubs: Stubs) -> None:
    failure = _submit(stubs, _agent(server=LONG, tools=[]))
    assert failure.code == grpc.StatusCode.NOT_FOUND
    assert failure.info.reason == "SERVER_BINDING_NOT_FOUND"
    _assert_bounded(failure)


@pytest.mark.parametrize(
    "call",
    ["Snapshot", "Result", "Cancel", "GetPending", "ListRounds", "WatchPending", "GetRound"],
)
def test_long_ids_are_refused_with_a_whole_error(stubs: Stubs, call: str) -> None:
    calls: dict[str, tuple[Any, Any]] = {
        "Snapshot": (
            stubs.executions.Snapshot,
            execution_service_pb2.SnapshotRequest(execution_id=LONG),
        ),
        "Result": (stubs.executions.Result, execution_service_pb2.ResultRequest(execution_id=LONG)),
        "Cancel": (stubs.executions.Cancel, execution_service_pb2.CancelRequest(execution_id=LONG)),
        "GetPending": (
            stubs.elicitation.GetPending,
            elicitation_service_pb2.GetPendingRequest(execution_id=LONG),
        ),
        "ListRounds": (
            stubs.elicitation.ListRounds,
            elicitation_service_pb2.ListRoundsRequest(execution_id=LONG),
        ),
        "WatchPending": (
            lambda request, timeout: list(stubs.executions.WatchPending(request, timeout=timeout)),
            execution_service_pb2.WatchPendingRequest(execution_id=LONG),
        ),
        "GetRound": (
            stubs.elicitation.GetRound,
            elicitation_service_pb2.GetRoundRequest(round_id=LONG),
        ),
    }
    method, request = calls[call]
    failure = expect_failure(method, request, timeout=30)
    _invalid(failure, "round_id" if call == "GetRound" else "execution_id")


def _pending(stubs: Stubs) -> tuple[str, elicitation_pb2.PendingElicitationRound]:
    execution_id = stubs.submit_managed()
    return execution_id, stubs.wait_pending(execution_id)


def _many_keys() -> elicitation_service_pb2.RespondRequest:
    request = respond_request("rnd", "k")
    for index in range(101):
        request.responses[f"key_{index}"].action = elicitation_pb2.ELICITATION_ACTION_DECLINE
    return request


def test_respond_limits_refuse_before_storing(stubs: Stubs) -> None:
    execution_id, pending = _pending(stubs)
    round_id = pending.round_id
    deep = respond_request(round_id, "deep")
    deep.responses["shipping_address"].content.update(
        {"street": "1 Main Street", "city": "Pune", "extra": dict(_nested(24))}
    )
    many = _many_keys()
    many.round_id = round_id
    long_key = respond_request(round_id, "long-key", request_key=LONG)
    cases = [
        (respond_request(round_id, LONG), "idempotency_key"),
        (respond_request(LONG, "k"), "round_id"),
        # An answer this large would make the execution's Result unreadable.
        (
            respond_request(round_id, "big", {"street": "s" * 3_000_000, "city": "Pune"}),
            "content",
        ),
        (deep, "content"),
        (many, "responses"),
        (long_key, "responses"),
    ]
    for request, field in cases:
        failure = expect_failure(stubs.elicitation.Respond, request, timeout=30)
        assert failure.info.reason == "MANAGED_INPUT_INVALID"
        _invalid(failure, field)
    # Nothing was stored: the round is still pending, without a response.
    record = stubs.elicitation.GetRound(
        elicitation_service_pb2.GetRoundRequest(round_id=round_id), timeout=30
    ).round
    assert record.status == elicitation_pb2.MANAGED_INPUT_STATUS_PENDING
    assert not record.responses.idempotency_key
    stubs.respond(round_id, f"address-{round_id}")
    result = stubs.result(execution_id)
    assert result.outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED
    assert result.operations[0].result["structuredContent"]["result"] == BOOKED


def test_an_accepted_large_answer_keeps_the_result_readable(stubs: Stubs) -> None:
    # The largest accepted answer; the server echoes it into its tool result
    # (twice: text and structured content), past the stored-result limit.
    execution_id, pending = _pending(stubs)
    street = "s" * 200_000
    stubs.respond(pending.round_id, f"big-{pending.round_id}", {"street": street, "city": "Pune"})
    result = stubs.result(execution_id)
    assert result.outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED
    (operation,) = result.operations
    assert operation.ok
    assert operation.result["m3_truncated"] is True
    assert operation.result["size_bytes"] > 262_144


def test_config_limits_and_round_timeouts(tmp_path: Path) -> None:
    path = tmp_path / "m3.toml"
    path.write_text(
        "[workers]\ndefault_round_timeout_seconds = 60\nmax_round_timeout_seconds = 120\n"
        "[limits]\nmax_tools = 5\nmax_response_content_bytes = 1000\n"
    )
    config = load_config(path)
    limits = config.runtime_limits()
    assert (limits.max_tools, limits.max_response_content_bytes) == (5, 1000)
    assert limits.max_round_timeout_seconds == 120
    assert config.workers.settings().default_round_timeout == timedelta(seconds=60)
    # A default above the maximum, or a response limit near the message limit, is refused.
    for text in (
        "[workers]\ndefault_round_timeout_seconds = 200\nmax_round_timeout_seconds = 120\n",
        "[limits]\nmax_response_content_bytes = 4000000\n",
    ):
        path.write_text(text)
        with pytest.raises(ConfigError):
            load_config(path)
