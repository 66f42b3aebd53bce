"""Wire-level error contract, black-box against `m3grpc serve`:

- a late Respond on a round that recovery failed: MANAGED_INPUT_RECOVERY_UNAVAILABLE;
- field violations are request paths in one spelling (walked back to proto fields);
- unknown enum values are reported as unknown, not as unset;
- values the decoder or converter cannot take (NaN/Infinity in a Struct, a
  Duration out of range, a Struct nested past the decoder's depth limit, bytes
  that are not a message) are INVALID_ARGUMENT with ErrorInfo, never
  INTERNAL/UNKNOWN, and the server logs no traceback for them.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2, struct_pb2
from google.protobuf.descriptor import Descriptor
from google.rpc import error_details_pb2

from m3grpc.wire.gen.m3.v1 import (
    elicitation_pb2,
    elicitation_service_pb2,
    execution_pb2,
    execution_service_pb2,
)

from .conftest import (
    ServerProcess,
    Stubs,
    expect_failure,
    failure,
    respond_request,
    start_server,
)
from .pathwalk import assert_request_path

BadRequest = error_details_pb2.BadRequest
SUBMIT = execution_service_pb2.SubmitRequest.DESCRIPTOR
RESPOND = elicitation_service_pb2.RespondRequest.DESCRIPTOR


def _violations(call: Any, request: Any, descriptor: Descriptor) -> dict[str, str]:
    """The call's field violations, each path checked against the request's descriptor."""
    caught = expect_failure(call, request, timeout=30)
    assert caught.code == grpc.StatusCode.INVALID_ARGUMENT, caught.status
    found = {v.field: v.description for v in caught.detail(BadRequest).field_violations}
    for path in found:
        assert_request_path(descriptor, path)
    return found


def _agent(**fields: Any) -> execution_pb2.AgentSpec:
    base: dict[str, Any] = {"harness": "scripted", "server": "shipping"}
    return execution_pb2.AgentSpec(**{**base, **fields})


# -- item 3: a late response to a round recovery failed ---------------------------------


def test_late_respond_after_recovery_is_recovery_unavailable(tmp_path: Path) -> None:
    worker = start_server(tmp_path, "worker", pool_size=1, lease_seconds=2.0)
    stubs = worker.stubs()
    try:
        execution_id = stubs.submit_managed()
        round_id = stubs.wait_pending(execution_id).round_id
    finally:
        worker.kill()  # dies owning the pending round
        stubs.close()
    time.sleep(2.5)  # past the dead worker's lease
    # A new replica recovers expired rounds as it starts.
    replica = start_server(tmp_path, "replica", pool_size=0, lease_seconds=600)
    stubs = replica.stubs()
    try:
        record = stubs.elicitation.GetRound(
            elicitation_service_pb2.GetRoundRequest(round_id=round_id), timeout=30
        ).round
        assert record.status == elicitation_pb2.MANAGED_INPUT_STATUS_FAILED
        assert record.failure_code == "recovery_unavailable"
        caught = expect_failure(stubs.elicitation.Respond, respond_request(round_id, "late"))
    finally:
        stubs.close()
        replica.terminate()
    assert caught.code == grpc.StatusCode.FAILED_PRECONDITION
    assert caught.info.reason == "MANAGED_INPUT_RECOVERY_UNAVAILABLE"
    assert dict(caught.info.metadata) == {"round_id": round_id, "execution_id": execution_id}
    (violation,) = caught.detail(error_details_pb2.PreconditionFailure).violations
    assert (violation.type, violation.subject) == ("MANAGED_INPUT_RECOVERY_UNAVAILABLE", round_id)


# -- item 5: request paths, one spelling ---------------------------------------------------


def test_submit_violations_name_request_fields(stubs: Stubs) -> None:
    request = execution_service_pb2.SubmitRequest(
        agent=_agent(round_timeout=duration_pb2.Duration(seconds=-5)),
        human_input=execution_pb2.HUMAN_INPUT_MANAGED,
    )
    found = _violations(stubs.executions.Submit, request, SUBMIT)
    assert "agent.round_timeout" in found, found
    plan = execution_pb2.ElicitationPlan(
        rules=[execution_pb2.ElicitationRule(decline=execution_pb2.ElicitationRule.Decline())]
    )
    request = execution_service_pb2.SubmitRequest(
        operation=execution_pb2.OperationSpec(
            server="shipping",
            operation=execution_pb2.OperationStep(
                kind=execution_pb2.OPERATION_KIND_TOOL, name="quote"
            ),
            elicitation_plan=execution_pb2.ElicitationPlan(),
            round_limit=5000,
        )
    )
    found = _violations(stubs.executions.Submit, request, SUBMIT)
    assert {"operation.elicitation_plan.rules", "operation.round_limit"} <= set(found), found
    request = execution_service_pb2.SubmitRequest(
        agent=_agent(elicitation_plan=plan), human_input=execution_pb2.HUMAN_INPUT_MANAGED
    )
    found = _violations(stubs.executions.Submit, request, SUBMIT)
    assert "agent.elicitation_plan" in found, found


def test_respond_violations_use_one_spelling(stubs: Stubs) -> None:
    execution_id = stubs.submit_managed()
    round_id = stubs.wait_pending(execution_id).round_id
    try:
        bad_content = respond_request(round_id, "k1", {"street": 7, "city": "Pune"})
        found = _violations(stubs.elicitation.Respond, bad_content, RESPOND)
        assert set(found) == {"responses['shipping_address'].content.street"}, found
        unset = respond_request(
            round_id, "k2", action=elicitation_pb2.ELICITATION_ACTION_UNSPECIFIED
        )
        found = _violations(stubs.elicitation.Respond, unset, RESPOND)
        assert found == {"responses['shipping_address'].action": "must be set"}
        wrong_key = respond_request(round_id, "k3", request_key="it's here")
        found = _violations(stubs.elicitation.Respond, wrong_key, RESPOND)
        assert set(found) == {"responses['shipping_address']", "responses['it\\'s here']"}
    finally:
        stubs.executions.Cancel(execution_service_pb2.CancelRequest(execution_id=execution_id))


# -- item 6: unknown enum values -------------------------------------------------------------


def test_unknown_enum_values_are_reported_as_unknown(stubs: Stubs) -> None:
    response = elicitation_pb2.ElicitationResponse(action=9)  # type: ignore[arg-type]
    request = elicitation_service_pb2.RespondRequest(
        round_id="rnd_x", idempotency_key="k", responses={"shipping_address": response}
    )
    found = _violations(stubs.elicitation.Respond, request, RESPOND)
    assert found == {"responses['shipping_address'].action": "unknown enum value 9"}

    request = execution_service_pb2.SubmitRequest(
        agent=_agent(
            permission_policy=7,  # type: ignore[arg-type]
            script=[execution_pb2.OperationStep(kind=42, name="quote")],  # type: ignore[arg-type]
        ),
        human_input=5,  # type: ignore[arg-type]
    )
    found = _violations(stubs.executions.Submit, request, SUBMIT)
    assert found == {
        "human_input": "unknown enum value 5",
        "agent.permission_policy": "unknown enum value 7",
        "agent.script[0].kind": "unknown enum value 42",
    }
    found = _violations(
        stubs.elicitation.ListRounds,
        elicitation_service_pb2.ListRoundsRequest(statuses=[1, 77]),  # type: ignore[list-item]
        elicitation_service_pb2.ListRoundsRequest.DESCRIPTOR,
    )
    assert found == {"statuses[1]": "unknown enum value 77"}
    # A list that long is refused before its entries are read (it held the event loop).
    found = _violations(
        stubs.elicitation.ListRounds,
        elicitation_service_pb2.ListRoundsRequest(statuses=[1] * 17),  # type: ignore[list-item]
        elicitation_service_pb2.ListRoundsRequest.DESCRIPTOR,
    )
    assert found == {"statuses": "must have at most 16 entries (17)"}


# -- item 14: values the decoder or converter cannot take --------------------------------


def _struct(value: dict[str, Any]) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(value)
    return message


def test_non_finite_numbers_in_structs(stubs: Stubs) -> None:
    response = elicitation_pb2.ElicitationResponse(
        action=elicitation_pb2.ELICITATION_ACTION_ACCEPT,
        content=_struct({"street": "x", "geo": {"lat": float("nan")}, "l": [1, float("inf")]}),
    )
    request = elicitation_service_pb2.RespondRequest(
        round_id="rnd_x", idempotency_key="k", responses={"a b": response}
    )
    found = _violations(stubs.elicitation.Respond, request, RESPOND)
    assert set(found) in (
        {"responses['a b'].content.geo.lat"},
        {"responses['a b'].content.l[1]"},
    ), found
    step = execution_pb2.OperationStep(
        kind=execution_pb2.OPERATION_KIND_TOOL,
        name="quote",
        arguments=_struct({"n": float("-inf")}),
    )
    request = execution_service_pb2.SubmitRequest(agent=_agent(script=[step]))
    found = _violations(stubs.executions.Submit, request, SUBMIT)
    assert set(found) == {"agent.script[0].arguments.n"}, found


@pytest.mark.parametrize(
    "duration",
    [
        duration_pb2.Duration(seconds=10**15),
        duration_pb2.Duration(seconds=-(10**15)),
        duration_pb2.Duration(seconds=1, nanos=-5),
        duration_pb2.Duration(nanos=2_000_000_000),
    ],
    ids=["huge", "huge-negative", "mixed-signs", "nanos-overflow"],
)
def test_durations_out_of_range(stubs: Stubs, duration: duration_pb2.Duration) -> None:
    submit = execution_service_pb2.SubmitRequest(agent=_agent(round_timeout=duration))
    assert set(_violations(stubs.executions.Submit, submit, SUBMIT)) == {"agent.round_timeout"}
    result = execution_service_pb2.ResultRequest(execution_id="exe_x", timeout=duration)
    found = _violations(
        stubs.executions.Result, result, execution_service_pb2.ResultRequest.DESCRIPTOR
    )
    assert set(found) == {"timeout"}


def test_undecodable_requests(shared_server: ServerProcess, stubs: Stubs) -> None:
    logged_before = len(shared_server.log.read_text())
    deep = elicitation_service_pb2.RespondRequest(round_id="rnd_x", idempotency_key="k")
    response = deep.responses["shipping_address"]
    response.action = elicitation_pb2.ELICITATION_ACTION_ACCEPT
    level = response.content
    for _ in range(60):
        level = level.fields["x"].struct_value
    cases = [
        ("/m3.v1.ElicitationService/Respond", deep.SerializeToString(), "MANAGED_INPUT_INVALID"),
        ("/m3.v1.ElicitationService/GetRound", b"\xff\xff\xff", "MANAGED_INPUT_INVALID"),
        ("/m3.v1.ExecutionService/Submit", b"\x0a\x05ab", "MODEL_VALIDATION_FAILED"),
        # Field 1 (execution_id) with bytes that are not UTF-8.
        ("/m3.v1.ExecutionService/Snapshot", b"\x0a\x02\xc3\x28", "MODEL_VALIDATION_FAILED"),
    ]
    for method, payload, reason in cases:
        call = stubs.channel.unary_unary(
            method, request_serializer=lambda b: b, response_deserializer=lambda b: b
        )
        with pytest.raises(grpc.RpcError) as caught:
            call(payload, timeout=30)
        got = failure(caught.value)
        assert got.code == grpc.StatusCode.INVALID_ARGUMENT, (method, got.status)
        assert got.info.reason == reason
    watch = stubs.channel.unary_stream(
        "/m3.v1.ExecutionService/WatchPending",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    with pytest.raises(grpc.RpcError) as caught:
        list(watch(b"\x0a\x01", timeout=30))
    assert failure(caught.value).info.reason == "MODEL_VALIDATION_FAILED"
    log = shared_server.log.read_text()[logged_before:]
    assert "rejected an undecodable m3.v1.RespondRequest" in log
    assert "Traceback" not in log


def test_nul_characters_are_rejected(stubs: Stubs) -> None:
    # No store can keep U+0000 (PostgreSQL text and JSONB refuse it).
    found = _violations(
        stubs.executions.Snapshot,
        execution_service_pb2.SnapshotRequest(execution_id="exe_\x00"),
        execution_service_pb2.SnapshotRequest.DESCRIPTOR,
    )
    assert set(found) == {"execution_id"}
    response = elicitation_pb2.ElicitationResponse(
        action=elicitation_pb2.ELICITATION_ACTION_ACCEPT,
        content=_struct({"street": "1 Main\x00Street", "city": "Pune"}),
    )
    request = elicitation_service_pb2.RespondRequest(
        round_id="rnd_x", idempotency_key="k", responses={"shipping_address": response}
    )
    found = _violations(stubs.elicitation.Respond, request, RESPOND)
    assert set(found) == {"responses['shipping_address'].content.street"}


def test_result_with_the_longest_duration_is_a_typed_wait_timeout(stubs: Stubs) -> None:
    execution_id = stubs.submit_managed()
    try:
        stubs.wait_pending(execution_id)
        longest = duration_pb2.Duration(seconds=315_576_000_000, nanos=999_999_999)
        request = execution_service_pb2.ResultRequest(execution_id=execution_id, timeout=longest)
        caught = expect_failure(stubs.executions.Result, request, timeout=2)
        assert caught.code == grpc.StatusCode.DEADLINE_EXCEEDED
        assert caught.info.reason == "RESULT_WAIT_TIMEOUT"
        assert caught.info.metadata["timeout"] == "315576000000.999999999s"
        submit = execution_service_pb2.SubmitRequest(
            agent=_agent(round_timeout=longest), human_input=execution_pb2.HUMAN_INPUT_MANAGED
        )
        try:
            accepted = stubs.executions.Submit(submit, timeout=30).execution_id
        except grpc.RpcError as error:  # a limit on round_timeout may refuse it: typed
            assert failure(error).code == grpc.StatusCode.INVALID_ARGUMENT
        else:
            stubs.executions.Cancel(execution_service_pb2.CancelRequest(execution_id=accepted))
    finally:
        stubs.executions.Cancel(execution_service_pb2.CancelRequest(execution_id=execution_id))
