"""Every row of the error mapping table, black-box: status code, ErrorInfo
(reason, domain, metadata) and the other details.

Rows that need special server set-ups live in test_replicas.py (recovery,
operation timeout), test_watch.py (shutting down) and test_internal.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2

from m3grpc.wire.gen.m3.v1 import (
    elicitation_pb2,
    elicitation_service_pb2,
    execution_pb2,
    execution_service_pb2,
)

from .conftest import (
    Failure,
    ServerProcess,
    Stubs,
    expect_failure,
    respond_request,
    start_server,
    write_config,
)

BadRequest = error_details_pb2.BadRequest
ResourceInfo = error_details_pb2.ResourceInfo
PreconditionFailure = error_details_pb2.PreconditionFailure
RetryInfo = error_details_pb2.RetryInfo


def _violations(bad_request: BadRequest) -> dict[str, str]:
    return {v.field: v.description for v in bad_request.field_violations}


def test_model_validation_failed_without_a_spec(stubs: Stubs) -> None:
    failure = expect_failure(stubs.executions.Submit, execution_service_pb2.SubmitRequest())
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
    assert failure.info.reason == "MODEL_VALIDATION_FAILED"
    assert "spec" in _violations(failure.detail(BadRequest))


def test_model_validation_failed_paths_point_into_the_request(stubs: Stubs) -> None:
    spec = execution_pb2.AgentSpec(
        harness="scripted",
        server="shipping",
        tools=["shipping:book_shipment", "other:tool"],
        elicitation_plan=execution_pb2.ElicitationPlan(
            rules=[execution_pb2.ElicitationRule(decline=execution_pb2.ElicitationRule.Decline())]
        ),
    )
    request = execution_service_pb2.SubmitRequest(
        agent=spec, human_input=execution_pb2.HUMAN_INPUT_MANAGED
    )
    failure = expect_failure(stubs.executions.Submit, request)
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
    assert failure.info.reason == "MODEL_VALIDATION_FAILED"
    assert {"agent.tools[1]", "agent.elicitation_plan"} <= set(
        _violations(failure.detail(BadRequest))
    )


def test_model_validation_failed_for_managed_operation_and_bad_steps(stubs: Stubs) -> None:
    operation = execution_pb2.OperationSpec(
        server="shipping", operation=execution_pb2.OperationStep(name="quote")
    )
    failure = expect_failure(
        stubs.executions.Submit,
        execution_service_pb2.SubmitRequest(
            operation=operation, human_input=execution_pb2.HUMAN_INPUT_MANAGED
        ),
    )
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "operation.operation.kind" in _violations(failure.detail(BadRequest))


def test_model_validation_failed_for_snapshot_and_result(stubs: Stubs) -> None:
    failure = expect_failure(stubs.executions.Snapshot, execution_service_pb2.SnapshotRequest())
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "execution_id" in _violations(failure.detail(BadRequest))
    request = execution_service_pb2.ResultRequest(execution_id="exe_x")
    request.timeout.FromSeconds(-1)
    failure = expect_failure(stubs.executions.Result, request)
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "timeout" in _violations(failure.detail(BadRequest))


def test_server_binding_not_found(stubs: Stubs) -> None:
    failure = expect_failure(stubs.submit_managed, server="no-such-server")
    assert failure.code == grpc.StatusCode.NOT_FOUND
    assert failure.info.reason == "SERVER_BINDING_NOT_FOUND"
    # The known names, in the metadata and the message.
    assert dict(failure.info.metadata) == {
        "server": "no-such-server",
        "known_servers": "example,shipping,shipping_mrtr",
    }
    assert "configured: example, shipping, shipping_mrtr" in failure.status.message
    info = failure.detail(ResourceInfo)
    assert (info.resource_type, info.resource_name) == (
        "m3grpc.dev/ServerBinding",
        "no-such-server",
    )


RESOURCE_TYPES = {"execution_id": "m3grpc.dev/Execution", "round_id": "m3grpc.dev/ElicitationRound"}


def _assert_not_found(failure: Failure, reason: str, key: str, name: str) -> None:
    """NOT_FOUND with `reason`, the ID under `key` and a ResourceInfo naming it."""
    assert failure.code == grpc.StatusCode.NOT_FOUND
    assert failure.info.reason == reason
    assert failure.info.metadata[key] == name
    info = failure.detail(ResourceInfo)
    assert (info.resource_type, info.resource_name) == (RESOURCE_TYPES[key], name)


def test_execution_not_found(stubs: Stubs) -> None:
    for call, request in (
        (stubs.executions.Snapshot, execution_service_pb2.SnapshotRequest(execution_id="exe_x")),
        (stubs.executions.Result, execution_service_pb2.ResultRequest(execution_id="exe_x")),
        (stubs.executions.Cancel, execution_service_pb2.CancelRequest(execution_id="exe_x")),
        (
            stubs.elicitation.GetPending,
            elicitation_service_pb2.GetPendingRequest(execution_id="exe_x"),
        ),
    ):
        _assert_not_found(
            expect_failure(call, request, timeout=10),
            "EXECUTION_NOT_FOUND",
            "execution_id",
            "exe_x",
        )


def test_watch_unknown_execution_and_bad_cursor(stubs: Stubs) -> None:
    def first(request: execution_service_pb2.WatchPendingRequest) -> None:
        next(iter(stubs.executions.WatchPending(request, timeout=10)))

    failure = expect_failure(first, execution_service_pb2.WatchPendingRequest(execution_id="exe_x"))
    assert failure.code == grpc.StatusCode.NOT_FOUND
    assert failure.info.reason == "EXECUTION_NOT_FOUND"
    failure = expect_failure(first, execution_service_pb2.WatchPendingRequest(cursor="!!"))
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
    assert failure.info.reason == "MANAGED_INPUT_INVALID"
    assert "cursor" in _violations(failure.detail(BadRequest))


def test_round_not_found(stubs: Stubs) -> None:
    for call, request in (
        (stubs.elicitation.GetRound, elicitation_service_pb2.GetRoundRequest(round_id="rnd_x")),
        (stubs.elicitation.Respond, respond_request("rnd_x", "key")),
    ):
        _assert_not_found(
            expect_failure(call, request, timeout=10), "ROUND_NOT_FOUND", "round_id", "rnd_x"
        )


def test_result_wait_timeout(stubs: Stubs) -> None:
    execution_id = stubs.submit_managed()
    stubs.wait_pending(execution_id)
    request = execution_service_pb2.ResultRequest(execution_id=execution_id)
    request.timeout.FromMilliseconds(250)
    failure = expect_failure(stubs.executions.Result, request, timeout=30)
    assert failure.code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert failure.info.reason == "RESULT_WAIT_TIMEOUT"
    assert dict(failure.info.metadata) == {"execution_id": execution_id, "timeout": "0.250s"}
    # Without a timeout the call's own deadline bounds the wait.
    with pytest.raises(grpc.RpcError) as caught:
        stubs.executions.Result(
            execution_service_pb2.ResultRequest(execution_id=execution_id), timeout=0.5
        )
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    stubs.executions.Cancel(execution_service_pb2.CancelRequest(execution_id=execution_id))


class TestOnAPendingRound:
    """Respond errors on one pending round; the round stays pending until answered."""

    @pytest.fixture
    def pending(self, stubs: Stubs) -> Iterator[elicitation_pb2.PendingElicitationRound]:
        execution_id = stubs.submit_managed()
        yield stubs.wait_pending(execution_id)
        stubs.executions.Cancel(execution_service_pb2.CancelRequest(execution_id=execution_id))

    def test_managed_input_invalid(
        self, stubs: Stubs, pending: elicitation_pb2.PendingElicitationRound
    ) -> None:
        # Schema content violation, wrong key, unset action: all INVALID_ARGUMENT.
        cases = [
            respond_request(pending.round_id, "k1", {"street": "1 Main Street"}),
            respond_request(pending.round_id, "k2", request_key="address"),
            elicitation_service_pb2.RespondRequest(
                round_id=pending.round_id,
                idempotency_key="k3",
                responses={"shipping_address": elicitation_pb2.ElicitationResponse()},
            ),
            respond_request(pending.round_id, ""),
        ]
        for request in cases:
            failure = expect_failure(stubs.elicitation.Respond, request)
            assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
            assert failure.info.reason == "MANAGED_INPUT_INVALID"
            assert failure.info.metadata["round_id"] == pending.round_id
            assert failure.detail(BadRequest).field_violations
        failure = expect_failure(stubs.elicitation.Respond, respond_request("", "k"))
        assert "round_id" in _violations(failure.detail(BadRequest))
        # Nothing changed: the round is still pending and answerable.
        still = stubs.wait_pending(pending.execution_id)
        assert still.round_id == pending.round_id
        assert not stubs.respond(pending.round_id, "k-ok").replayed

    def test_conflict_and_state_invalid(
        self, stubs: Stubs, pending: elicitation_pb2.PendingElicitationRound
    ) -> None:
        stubs.respond(pending.round_id, "key-a")
        # Same key, other response: ABORTED.
        failure = expect_failure(
            stubs.elicitation.Respond,
            respond_request(pending.round_id, "key-a", {"street": "2 Side Road", "city": "Pune"}),
        )
        assert failure.code == grpc.StatusCode.ABORTED
        assert failure.info.reason == "MANAGED_INPUT_CONFLICT"
        assert dict(failure.info.metadata) == {
            "conflict_kind": "idempotency_key_reused",
            "round_id": pending.round_id,
        }
        # Another key after the round was answered: FAILED_PRECONDITION.
        failure = expect_failure(stubs.elicitation.Respond, respond_request(pending.round_id, "b"))
        assert failure.code == grpc.StatusCode.FAILED_PRECONDITION
        assert failure.info.reason == "MANAGED_INPUT_STATE_INVALID"
        assert failure.info.metadata["round_id"] == pending.round_id
        assert failure.info.metadata["status"]
        (violation,) = failure.detail(PreconditionFailure).violations
        assert violation.type == "MANAGED_INPUT_STATE_INVALID"
        assert violation.subject == pending.round_id


def test_list_rounds_invalid_arguments(stubs: Stubs) -> None:
    cases = {
        "page_size": elicitation_service_pb2.ListRoundsRequest(page_size=-1),
        "page_token": elicitation_service_pb2.ListRoundsRequest(page_token="garbage"),
    }
    for field, request in cases.items():
        failure = expect_failure(stubs.elicitation.ListRounds, request)
        assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
        assert failure.info.reason == "MANAGED_INPUT_INVALID"
        assert field in _violations(failure.detail(BadRequest))


def test_page_token_is_bound_to_its_filters(stubs: Stubs) -> None:
    execution_ids = [stubs.submit_managed() for _ in range(2)]
    for execution_id in execution_ids:
        stubs.wait_pending(execution_id)
    page = stubs.elicitation.ListRounds(elicitation_service_pb2.ListRoundsRequest(page_size=1))
    assert page.next_page_token
    failure = expect_failure(
        stubs.elicitation.ListRounds,
        elicitation_service_pb2.ListRoundsRequest(
            page_size=1, page_token=page.next_page_token, execution_id=execution_ids[0]
        ),
    )
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
    for execution_id in execution_ids:
        stubs.executions.Cancel(execution_service_pb2.CancelRequest(execution_id=execution_id))


def test_work_queue_full(tmp_path: Path) -> None:
    # No workers and room for one queued execution: the second submission is refused.
    server = start_server(tmp_path, pool_size=0, queue_capacity=1)
    client = server.stubs()
    try:
        first = client.submit_managed(request_id="queued-1")
        failure = expect_failure(client.submit_managed, request_id="queued-2")
        assert failure.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert failure.info.reason == "WORK_QUEUE_FULL"
        assert dict(failure.info.metadata) == {"queue_capacity": "1"}
        assert failure.detail(RetryInfo).retry_delay.ToTimedelta().total_seconds() > 0
        # A retry of the submission that fills the queue (AIP-155) gets its execution,
        # and a different request under its ID the conflict, not WORK_QUEUE_FULL.
        assert client.submit_managed(request_id="queued-1") == first
        reused = expect_failure(client.submit_managed, request_id="queued-1", round_limit=2)
        assert reused.code == grpc.StatusCode.ABORTED
        assert reused.info.metadata["conflict_kind"] == "request_id_reused"
    finally:
        client.close()
        server.terminate()


def test_a_retry_after_its_bindings_configuration_changed_is_the_same_request(
    tmp_path: Path,
) -> None:
    # The request names its server; the service's configuration of it (here a rotated
    # environment variable, across a restart) is not part of what the client sent.
    config = write_config(tmp_path / "m3.toml", tmp_path / "m3.sqlite", pool_size=0)
    server = ServerProcess(config, tmp_path / "first.log").start()
    client = server.stubs()
    try:
        first = client.submit_managed(request_id="retry-across-restart")
    finally:
        client.close()
        server.terminate()
    text = config.read_text()
    config.write_text(
        text.replace(
            "[servers.shipping]\n", '[servers.shipping]\nenv = { API_TOKEN = "rotated" }\n', 1
        )
    )
    server = ServerProcess(config, tmp_path / "second.log").start()
    client = server.stubs()
    try:
        assert client.submit_managed(request_id="retry-across-restart") == first
        reused = expect_failure(
            client.submit_managed, request_id="retry-across-restart", round_limit=2
        )
        assert reused.info.metadata["conflict_kind"] == "request_id_reused"
    finally:
        client.close()
        server.terminate()
