"""One rule for every ID field, on every RPC (docs/reference/identifiers.md).

An ID (`execution_id`, `round_id`) or a caller's key (`request_id`,
`idempotency_key`) is a non-empty string, not blank (only whitespace), at most
128 characters (keys: 200), with no NUL or lone surrogate. Breaking the rule is
INVALID_ARGUMENT with a field violation naming the field, before anything is
read or stored; the error never echoes the value unbounded. A well-formed ID that
names nothing is NOT_FOUND. An optional ID field left empty means "not given".

Black box: the shared `m3grpc serve` of tests/api/conftest.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2

from m3grpc.wire.gen.m3.v1 import (
    elicitation_pb2,
    elicitation_service_pb2,
    execution_pb2,
    execution_service_pb2,
)

from .conftest import Failure, Stubs, expect_failure, respond_request

BadRequest = error_details_pb2.BadRequest
LONG = "x" * 5000
# Each kind of malformed value, by name.
MALFORMED = {"empty": "", "blank": " ", "whitespace": "\t \n", "long": LONG, "nul": "id\x00"}


def _watch(stubs: Stubs) -> Callable[..., Any]:
    def first(request: execution_service_pb2.WatchPendingRequest, timeout: float) -> None:
        next(iter(stubs.executions.WatchPending(request, timeout=timeout)))

    return first


def _submit(stubs: Stubs) -> Callable[..., Any]:
    def submit(request_id: str, timeout: float) -> Any:
        spec = execution_pb2.AgentSpec(
            harness="scripted", server="shipping", tools=["shipping:quote"], prompt="Quote."
        )
        return stubs.executions.Submit(
            execution_service_pb2.SubmitRequest(agent=spec, request_id=request_id),
            timeout=timeout,
        )

    return submit


# (RPC, field, required): every ID field a request carries, each with the call
# that sends `value` in it. An optional field's empty value is "not given".
FIELDS: dict[str, tuple[bool, Callable[[Stubs, str], tuple[Callable[..., Any], Any]]]] = {
    "Snapshot.execution_id": (
        True,
        lambda s, v: (
            s.executions.Snapshot,
            execution_service_pb2.SnapshotRequest(execution_id=v),
        ),
    ),
    "Result.execution_id": (
        True,
        lambda s, v: (s.executions.Result, execution_service_pb2.ResultRequest(execution_id=v)),
    ),
    "Cancel.execution_id": (
        True,
        lambda s, v: (s.executions.Cancel, execution_service_pb2.CancelRequest(execution_id=v)),
    ),
    "WatchPending.execution_id": (
        False,
        lambda s, v: (_watch(s), execution_service_pb2.WatchPendingRequest(execution_id=v)),
    ),
    "GetPending.execution_id": (
        True,
        lambda s, v: (
            s.elicitation.GetPending,
            elicitation_service_pb2.GetPendingRequest(execution_id=v),
        ),
    ),
    "ListRounds.execution_id": (
        False,
        lambda s, v: (
            s.elicitation.ListRounds,
            elicitation_service_pb2.ListRoundsRequest(execution_id=v),
        ),
    ),
    "GetRound.round_id": (
        True,
        lambda s, v: (s.elicitation.GetRound, elicitation_service_pb2.GetRoundRequest(round_id=v)),
    ),
    "Respond.round_id": (True, lambda s, v: (s.elicitation.Respond, respond_request(v, "k"))),
    "Respond.idempotency_key": (
        True,
        lambda s, v: (s.elicitation.Respond, respond_request("rnd_x", v)),
    ),
    "Respond.execution_id": (
        False,
        lambda s, v: (s.elicitation.Respond, _with_execution(respond_request("rnd_x", "k"), v)),
    ),
    "Submit.request_id": (False, lambda s, v: (_submit(s), v)),
}


def _with_execution(
    request: elicitation_service_pb2.RespondRequest, execution_id: str
) -> elicitation_service_pb2.RespondRequest:
    request.execution_id = execution_id
    return request


def assert_refused(failure: Failure, field: str, reason: str = "MANAGED_INPUT_INVALID") -> None:
    """INVALID_ARGUMENT, `reason`, a violation of exactly `field`, nothing long echoed."""
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT, failure.status
    assert failure.info.reason == reason, failure.info
    fields = [v.field for v in failure.detail(BadRequest).field_violations]
    assert fields == [field], fields
    assert len(failure.status.message) <= 300, failure.status.message
    for key, value in failure.info.metadata.items():
        assert len(key) <= 80 and len(value) <= 80, (key, value)
    assert failure.status.ByteSize() < 4000


@pytest.mark.parametrize("kind", list(MALFORMED))
@pytest.mark.parametrize("rpc_field", list(FIELDS))
def test_a_malformed_id_is_invalid_argument_naming_its_field(
    stubs: Stubs, rpc_field: str, kind: str
) -> None:
    required, build = FIELDS[rpc_field]
    if kind == "empty" and not required:
        pytest.skip("an optional field left empty is not given")
    call, request = build(stubs, MALFORMED[kind])
    field = rpc_field.split(".")[1]
    reason = "MODEL_VALIDATION_FAILED" if rpc_field == "Submit.request_id" else None
    assert_refused(expect_failure(call, request, timeout=30), field, *([reason] if reason else []))


@pytest.mark.parametrize(
    "rpc_field",
    [name for name in FIELDS if name.split(".")[1] in ("execution_id", "round_id")],
)
def test_a_well_formed_unknown_id_is_not_found(stubs: Stubs, rpc_field: str) -> None:
    _, build = FIELDS[rpc_field]
    field = rpc_field.split(".")[1]
    unknown = "exe_unknown" if field == "execution_id" else "rnd_unknown"
    call, request = build(stubs, unknown)
    if rpc_field == "ListRounds.execution_id":
        assert not call(request, timeout=30).rounds  # a filter: nothing matches
        return
    failure = expect_failure(call, request, timeout=30)
    assert failure.code == grpc.StatusCode.NOT_FOUND, failure.status
    # Respond names its round first: an unknown round is ROUND_NOT_FOUND.
    expected = "round_id" if rpc_field.startswith("Respond.") else field
    assert failure.info.reason == (
        "ROUND_NOT_FOUND" if expected == "round_id" else "EXECUTION_NOT_FOUND"
    )
    assert set(failure.info.metadata) == {expected}


class TestRespondExecutionId:
    """Respond's `execution_id` (field 4) is checked as a field of its own."""

    @pytest.fixture
    def pending(self, stubs: Stubs) -> Iterator[elicitation_pb2.PendingElicitationRound]:
        execution_id = stubs.submit_managed()
        yield stubs.wait_pending(execution_id)
        stubs.executions.Cancel(execution_service_pb2.CancelRequest(execution_id=execution_id))

    @pytest.mark.parametrize("kind", ["blank", "whitespace", "long"])
    def test_malformed_on_a_real_round(
        self, stubs: Stubs, pending: elicitation_pb2.PendingElicitationRound, kind: str
    ) -> None:
        request = _with_execution(respond_request(pending.round_id, "k"), MALFORMED[kind])
        failure = expect_failure(stubs.elicitation.Respond, request, timeout=30)
        assert_refused(failure, "execution_id")
        # Nothing changed: the round is still pending and takes its answer.
        assert not stubs.respond(pending.round_id, f"ok-{kind}").replayed

    def test_another_executions_round_changes_nothing(
        self, stubs: Stubs, pending: elicitation_pb2.PendingElicitationRound
    ) -> None:
        request = _with_execution(respond_request(pending.round_id, "k"), "exe_another")
        failure = expect_failure(stubs.elicitation.Respond, request, timeout=30)
        # As documented on the field: the round does not belong to that execution.
        assert_refused(failure, "round_id")
        assert dict(failure.info.metadata) == {
            "round_id": pending.round_id,
            "execution_id": "exe_another",
        }
        request.execution_id = pending.execution_id
        assert not stubs.elicitation.Respond(request, timeout=30).replayed
