"""Fuzz every RPC through a real `m3grpc serve` (hypothesis, bounded): random
field values, unicode, huge and empty strings, unknown enum values, NaN and
infinities, Durations out of range, Structs nested past the decoder's depth
limit, and raw bytes that are not a message.

Every failed call must be a typed error: never INTERNAL or UNKNOWN, always a
google.rpc.Status with exactly one m3grpc.dev ErrorInfo, every field
violation a path into the request (walked along its descriptor), and the
store (read straight from the SQLite file, read-only) unchanged by it. The
server logs no traceback.

The set-up gives the fuzz a real pending round to answer: a worker replica
creates it and is killed, and an idle replica (no workers; the dead worker's
lease is long) serves the calls, so nothing but these calls writes the store.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2, message, struct_pb2
from google.protobuf.descriptor import Descriptor
from google.rpc import error_details_pb2
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from m3grpc.wire.gen.m3.v1 import (
    elicitation_pb2,
    elicitation_service_pb2,
    execution_pb2,
    execution_service_pb2,
)

from .conftest import ServerProcess, Stubs, failure, start_server
from .pathwalk import assert_request_path

BINDINGS = ("shipping", "shipping_mrtr")
REQUEST_KEY = "shipping_address"


@dataclass
class Target:
    server: ServerProcess
    stubs: Stubs
    database: Path
    execution_id: str
    round_id: str


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    tmp = tmp_path_factory.mktemp("fuzz")
    worker = start_server(tmp, "worker", pool_size=1, lease_seconds=600)
    stubs = worker.stubs()
    try:
        execution_id = stubs.submit_managed()
        round_id = stubs.wait_pending(execution_id).round_id
    finally:
        worker.kill()
        stubs.close()
    idle = start_server(tmp, "idle", pool_size=0, lease_seconds=600)
    stubs = idle.stubs()
    try:
        yield Target(idle, stubs, tmp / "m3.sqlite", execution_id, round_id)
    finally:
        stubs.close()
        idle.terminate()
    assert "Traceback" not in idle.log.read_text()


def _store(database: Path) -> tuple[Any, ...]:
    """Everything the service stores, read from the file without writing."""
    with closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as conn:
        return tuple(
            conn.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()
            for table in ("m3_executions", "m3_managed_input_rounds", "m3_events")
        )


def _check(target: Target, call: Callable[[], Any], request: Descriptor) -> None:
    """Run one call; if it fails, it fails typed and changes nothing."""
    before = _store(target.database)
    try:
        call()
    except grpc.RpcError as error:
        assert error.code() not in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN), error
        got = failure(error)  # a google.rpc.Status with exactly one m3grpc.dev ErrorInfo
        assert got.info.reason, got.status
        for detail in got.status.details:
            if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad = error_details_pb2.BadRequest()
                detail.Unpack(bad)
                for violation in bad.field_violations:
                    assert_request_path(request, violation.field)
        assert _store(target.database) == before, f"{got.info.reason} changed the store"


FUZZ = settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# -- strategies -------------------------------------------------------------------------------

HUGE = st.integers(1_000, 100_000).map(lambda n: "é" * n)
TEXT = st.one_of(st.just(""), st.text(max_size=30), HUGE)
SHORT = st.text(max_size=12)
ENUM = st.one_of(st.integers(-3, 12), st.integers(-(2**31), 2**31 - 1))
INT32 = st.integers(-(2**31), 2**31 - 1)
NUMBER = st.one_of(st.floats(), st.integers(-(2**60), 2**60))
JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), NUMBER, SHORT),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(SHORT, inner, max_size=3)),
    max_leaves=10,
)


def _nested(depth: int) -> dict[str, Any]:
    document: dict[str, Any] = {"leaf": 1}
    for _ in range(depth):
        document = {"x": document}
    return document


def _struct(document: dict[str, Any]) -> struct_pb2.Struct:
    value = struct_pb2.Struct()
    value.update(document)
    return value


STRUCT = st.one_of(st.dictionaries(SHORT, JSON, max_size=4), st.integers(20, 60).map(_nested)).map(
    _struct
)
DURATION = st.builds(
    duration_pb2.Duration,
    seconds=st.one_of(st.integers(-2, 5), st.integers(-(2**63), 2**63 - 1)),
    nanos=st.one_of(st.integers(0, 999_999_999), INT32),
)


def _set(holder: message.Message, field: str, value: message.Message | None) -> None:
    if value is not None:
        getattr(holder, field).CopyFrom(value)


@st.composite
def steps(draw: st.DrawFn) -> execution_pb2.OperationStep:
    step = execution_pb2.OperationStep(kind=draw(ENUM), name=draw(TEXT))
    _set(step, "arguments", draw(st.none() | STRUCT))
    return step


@st.composite
def plans(draw: st.DrawFn) -> execution_pb2.ElicitationPlan:
    plan = execution_pb2.ElicitationPlan()
    for _ in range(draw(st.integers(0, 3))):
        rule = plan.rules.add()
        for name in ("operation_name", "request_key", "message_contains"):
            text = draw(st.none() | TEXT)
            if text is not None:
                setattr(rule, name, text)
        answer = draw(
            st.sampled_from(["", "accept_content", "accept_defaults", "decline", "cancel"])
        )
        if answer == "accept_content":
            rule.accept_content.CopyFrom(draw(STRUCT))
        elif answer:
            getattr(rule, answer).SetInParent()
    return plan


@st.composite
def agents(draw: st.DrawFn) -> execution_pb2.AgentSpec:
    server = draw(st.sampled_from(BINDINGS) | TEXT)
    agent = execution_pb2.AgentSpec(
        harness=draw(st.just("scripted") | TEXT),
        models=draw(st.lists(TEXT, max_size=2)),
        prompt=draw(TEXT),
        server=server,
        tools=draw(st.lists(st.just(f"{server}:book_shipment") | TEXT, max_size=3)),
        permission_policy=draw(ENUM),
        round_limit=draw(INT32),
    )
    # add().CopyFrom: the constructor re-parses messages, which a deep Struct fails.
    for step in draw(st.lists(steps(), max_size=2)):
        agent.script.add().CopyFrom(step)
    _set(agent, "elicitation_plan", draw(st.none() | plans()))
    _set(agent, "round_timeout", draw(st.none() | DURATION))
    return agent


@st.composite
def operations(draw: st.DrawFn) -> execution_pb2.OperationSpec:
    operation = execution_pb2.OperationSpec(
        server=draw(st.sampled_from(BINDINGS) | TEXT), round_limit=draw(INT32)
    )
    _set(operation, "operation", draw(st.none() | steps()))
    _set(operation, "elicitation_plan", draw(st.none() | plans()))
    return operation


@st.composite
def submits(draw: st.DrawFn) -> execution_service_pb2.SubmitRequest:
    request = execution_service_pb2.SubmitRequest(human_input=draw(ENUM), request_id=draw(TEXT))
    spec = draw(st.sampled_from(["", "agent", "operation"]))
    if spec == "agent":
        request.agent.CopyFrom(draw(agents()))
    elif spec == "operation":
        request.operation.CopyFrom(draw(operations()))
    return request


@st.composite
def responses(draw: st.DrawFn) -> elicitation_pb2.ElicitationResponse:
    response = elicitation_pb2.ElicitationResponse(action=draw(ENUM))
    _set(response, "content", draw(st.none() | STRUCT))
    return response


# -- one test per RPC ------------------------------------------------------------------------


@FUZZ
@given(request=submits())
def test_submit(target: Target, request: execution_service_pb2.SubmitRequest) -> None:
    _check(
        target,
        lambda: target.stubs.executions.Submit(request, timeout=30),
        execution_service_pb2.SubmitRequest.DESCRIPTOR,
    )


@FUZZ
@given(data=st.data())
def test_respond(target: Target, data: st.DataObject) -> None:
    round_id = data.draw(st.just(target.round_id) | TEXT)
    answers = data.draw(
        st.dictionaries(st.just(REQUEST_KEY) | SHORT | HUGE, responses(), max_size=3)
    )
    # Keep the round pending: never send the one simple valid answer.
    assume(
        not (
            round_id == target.round_id
            and set(answers) == {REQUEST_KEY}
            and answers[REQUEST_KEY].action
            in (
                elicitation_pb2.ELICITATION_ACTION_DECLINE,
                elicitation_pb2.ELICITATION_ACTION_CANCEL,
            )
            and not answers[REQUEST_KEY].HasField("content")
        )
    )
    request = elicitation_service_pb2.RespondRequest(
        round_id=round_id, idempotency_key=data.draw(TEXT)
    )
    for key, answer in answers.items():
        request.responses[key].CopyFrom(answer)
    _check(
        target,
        lambda: target.stubs.elicitation.Respond(request, timeout=30),
        elicitation_service_pb2.RespondRequest.DESCRIPTOR,
    )


@FUZZ
@given(data=st.data())
def test_execution_reads(target: Target, data: st.DataObject) -> None:
    executions = target.stubs.executions
    method = data.draw(st.sampled_from(["Snapshot", "Result", "Cancel", "WatchPending"]))
    if method == "Snapshot":
        request: Any = execution_service_pb2.SnapshotRequest(
            execution_id=data.draw(st.just(target.execution_id) | TEXT)
        )
        call: Callable[[], Any] = lambda: executions.Snapshot(request, timeout=30)  # noqa: E731
    elif method == "Result":  # never the real (unfinished) execution: no long waits
        request = execution_service_pb2.ResultRequest(
            execution_id=data.draw(TEXT.filter(lambda t: t != target.execution_id))
        )
        _set(request, "timeout", data.draw(st.none() | DURATION))
        call = lambda: executions.Result(request, timeout=30)  # noqa: E731
    elif method == "Cancel":  # never the real execution: its round stays pending
        request = execution_service_pb2.CancelRequest(
            execution_id=data.draw(TEXT.filter(lambda t: t != target.execution_id))
        )
        call = lambda: executions.Cancel(request, timeout=30)  # noqa: E731
    else:  # an unknown execution: the stream fails at once instead of waiting
        request = execution_service_pb2.WatchPendingRequest(
            execution_id=data.draw(TEXT.filter(lambda t: t not in ("", target.execution_id))),
            cursor=data.draw(TEXT),
        )
        call = lambda: list(executions.WatchPending(request, timeout=30))  # noqa: E731
    _check(target, call, request.DESCRIPTOR)


@FUZZ
@given(data=st.data())
def test_elicitation_reads(target: Target, data: st.DataObject) -> None:
    elicitation = target.stubs.elicitation
    method = data.draw(st.sampled_from(["GetPending", "GetRound", "ListRounds"]))
    if method == "GetPending":
        request: Any = elicitation_service_pb2.GetPendingRequest(
            execution_id=data.draw(st.just(target.execution_id) | TEXT)
        )
        call: Callable[[], Any] = lambda: elicitation.GetPending(request, timeout=30)  # noqa: E731
    elif method == "GetRound":
        request = elicitation_service_pb2.GetRoundRequest(
            round_id=data.draw(st.just(target.round_id) | TEXT)
        )
        call = lambda: elicitation.GetRound(request, timeout=30)  # noqa: E731
    else:
        request = elicitation_service_pb2.ListRoundsRequest(
            execution_id=data.draw(st.just(target.execution_id) | TEXT),
            page_size=data.draw(INT32),
            page_token=data.draw(TEXT),
            statuses=data.draw(st.lists(ENUM, max_size=3)),
        )
        call = lambda: elicitation.ListRounds(request, timeout=30)  # noqa: E731
    _check(target, call, request.DESCRIPTOR)


METHODS = {
    f"/{service.full_name}/{method.name}": method
    for module in (execution_service_pb2, elicitation_service_pb2)
    for service in module.DESCRIPTOR.services_by_name.values()
    for method in service.methods
}


def _deep_respond() -> bytes:
    request = elicitation_service_pb2.RespondRequest(round_id="rnd_x", idempotency_key="k")
    level = request.responses[REQUEST_KEY].content
    for _ in range(60):
        level = level.fields["x"].struct_value
    return request.SerializeToString()


@settings(FUZZ, max_examples=60)
@given(
    method=st.sampled_from(sorted(METHODS)),
    payload=st.one_of(st.binary(max_size=64), st.just(_deep_respond())),
)
def test_raw_bytes(target: Target, method: str, payload: bytes) -> None:
    descriptor = METHODS[method]
    request_cls = getattr(
        execution_service_pb2
        if descriptor.containing_service.name == "ExecutionService"
        else elicitation_service_pb2,
        descriptor.input_type.name,
    )
    try:
        decoded = request_cls.FromString(payload)
    except message.DecodeError:
        decoded = None
    if decoded is not None:
        # Bytes that happen to decode: keep off calls that would wait (the real
        # execution's Result, or a watch that ends only when cancelled).
        assume(getattr(decoded, "execution_id", None) not in ("", target.execution_id))
    identity: Callable[[bytes], bytes] = lambda raw: raw  # noqa: E731
    channel = target.stubs.channel
    if descriptor.server_streaming:
        stream = channel.unary_stream(
            method, request_serializer=identity, response_deserializer=identity
        )
        call: Callable[[], Any] = lambda: list(stream(payload, timeout=30))  # noqa: E731
    else:
        unary = channel.unary_unary(
            method, request_serializer=identity, response_deserializer=identity
        )
        call = lambda: unary(payload, timeout=30)  # noqa: E731
    _check(target, call, descriptor.input_type)
