"""The service through generated stubs: the seed flow, idempotency, rounds,
health checking and reflection."""

from __future__ import annotations

import grpc
from google.protobuf import descriptor_pool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from m3grpc.wire.gen.m3.v1 import (
    elicitation_pb2,
    elicitation_service_pb2,
    execution_pb2,
    execution_service_pb2,
)

from .conftest import ADDRESS, BOOKED, ServerProcess, Stubs, expect_failure


def test_seed_flow(stubs: Stubs) -> None:
    execution_id = stubs.submit_managed()
    state = stubs.executions.Snapshot(
        execution_service_pb2.SnapshotRequest(execution_id=execution_id)
    ).state
    assert state.human_input == execution_pb2.HUMAN_INPUT_MANAGED
    pending = stubs.wait_pending(execution_id)
    assert pending.execution_id == execution_id
    assert pending.server == "shipping"
    assert pending.operation_kind == execution_pb2.OPERATION_KIND_TOOL
    assert pending.operation_name == "book_shipment"
    assert (pending.round_index, pending.round_limit) == (0, 8)
    request = pending.requests["shipping_address"]
    assert request.WhichOneof("mode") == "form"
    assert set(request.form.requested_schema["properties"]) == {"street", "city"}

    answer = stubs.respond(pending.round_id, f"address-{pending.round_id}")
    assert answer.round_id == pending.round_id
    assert answer.status == elicitation_pb2.MANAGED_INPUT_STATUS_RESPONSE_VALIDATED
    assert not answer.replayed

    result = stubs.result(execution_id)
    assert result.outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED
    (operation,) = result.operations
    assert operation.ok
    assert operation.result["structuredContent"]["result"] == BOOKED


def test_mrtr_server_and_round_settings(stubs: Stubs) -> None:
    # A 2026-07-28 server (InputRequiredResult) and the AgentSpec round settings.
    agent = execution_pb2.AgentSpec(round_limit=3)
    agent.round_timeout.FromSeconds(600)
    execution_id = stubs.submit_managed(
        server="shipping_mrtr", round_limit=3, round_timeout=agent.round_timeout
    )
    pending = stubs.wait_pending(execution_id)
    assert pending.round_limit == 3
    assert pending.HasField("deadline")
    stubs.respond(pending.round_id, "k")
    assert stubs.result(execution_id).outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED


def test_fail_mode_without_plan_fails_the_operation(stubs: Stubs) -> None:
    spec = execution_pb2.AgentSpec(
        harness="scripted", server="shipping", tools=["shipping:book_shipment"]
    )
    # human_input UNSPECIFIED means HUMAN_INPUT_FAIL.
    submitted = stubs.executions.Submit(execution_service_pb2.SubmitRequest(agent=spec))
    assert submitted.state.human_input == execution_pb2.HUMAN_INPUT_FAIL
    result = stubs.result(submitted.execution_id)
    assert result.outcome == execution_pb2.EXECUTION_OUTCOME_FAILED
    assert result.failure_code == "elicitation_not_answered"


def test_fail_mode_with_a_plan_and_an_operation_spec(stubs: Stubs) -> None:
    rule = execution_pb2.ElicitationRule(request_key="shipping_address")
    rule.accept_content.update(ADDRESS)
    operation = execution_pb2.OperationSpec(
        server="shipping",
        operation=execution_pb2.OperationStep(
            kind=execution_pb2.OPERATION_KIND_TOOL, name="book_shipment"
        ),
        elicitation_plan=execution_pb2.ElicitationPlan(rules=[rule]),
    )
    submitted = stubs.executions.Submit(execution_service_pb2.SubmitRequest(operation=operation))
    result = stubs.result(submitted.execution_id)
    assert result.outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED
    assert result.operations[0].result["structuredContent"]["result"] == BOOKED


def test_submit_is_idempotent_per_request_id(stubs: Stubs) -> None:
    first = stubs.submit_managed(request_id="req-idempotent-1")
    again = stubs.submit_managed(request_id="req-idempotent-1")
    assert again == first
    # The same request_id for a different request is a conflict.
    failure = expect_failure(stubs.submit_managed, request_id="req-idempotent-1", models=["m"])
    assert failure.code == grpc.StatusCode.ABORTED
    assert failure.info.reason == "MANAGED_INPUT_CONFLICT"
    assert failure.info.metadata["conflict_kind"] == "request_id_reused"
    stubs.executions.Cancel(execution_service_pb2.CancelRequest(execution_id=first))


def test_respond_is_idempotent_per_key(stubs: Stubs) -> None:
    execution_id = stubs.submit_managed()
    pending = stubs.wait_pending(execution_id)
    first = stubs.respond(pending.round_id, "same-key")
    assert not first.replayed
    stubs.result(execution_id)  # the round moves on; a replay still succeeds
    again = stubs.respond(pending.round_id, "same-key")
    assert again.replayed
    assert again.round_id == pending.round_id
    assert again.status == elicitation_pb2.MANAGED_INPUT_STATUS_RESOLVED


def test_get_round_is_redacted(stubs: Stubs) -> None:
    execution_id = stubs.submit_managed()
    pending = stubs.wait_pending(execution_id)
    stubs.respond(pending.round_id, "redacted-key")
    stubs.result(execution_id)
    record = stubs.elicitation.GetRound(
        elicitation_service_pb2.GetRoundRequest(round_id=pending.round_id)
    ).round
    assert record.status == elicitation_pb2.MANAGED_INPUT_STATUS_RESOLVED
    assert record.responses.idempotency_key == "redacted-key"
    response = record.responses.responses["shipping_address"]
    assert response.action == elicitation_pb2.ELICITATION_ACTION_ACCEPT
    assert list(response.content_keys) == ["city", "street"]
    assert record.responses.digest
    assert record.delivery_attempts == 1
    assert record.HasField("resolve_time")
    wire = record.SerializeToString()
    assert b"Pune" not in wire and b"Main Street" not in wire


def test_list_rounds_pages(stubs: Stubs) -> None:
    execution_ids = [stubs.submit_managed() for _ in range(3)]
    rounds = [stubs.wait_pending(e).round_id for e in execution_ids]
    seen: list[str] = []
    token = ""
    for _ in range(100):
        page = stubs.elicitation.ListRounds(
            elicitation_service_pb2.ListRoundsRequest(
                page_size=2,
                page_token=token,
                statuses=[elicitation_pb2.MANAGED_INPUT_STATUS_PENDING],
            )
        )
        assert len(page.rounds) <= 2
        seen += [r.round_id for r in page.rounds]
        token = page.next_page_token
        if not token:
            break
    assert len(seen) == len(set(seen))
    assert set(rounds) <= set(seen)
    one = stubs.elicitation.ListRounds(
        elicitation_service_pb2.ListRoundsRequest(execution_id=execution_ids[1])
    )
    assert [r.round_id for r in one.rounds] == [rounds[1]]
    assert not one.next_page_token
    for execution_id in execution_ids:
        stubs.executions.Cancel(execution_service_pb2.CancelRequest(execution_id=execution_id))


def test_cancel(stubs: Stubs) -> None:
    execution_id = stubs.submit_managed()
    pending = stubs.wait_pending(execution_id)
    stubs.executions.Cancel(execution_service_pb2.CancelRequest(execution_id=execution_id))
    result = stubs.result(execution_id)
    assert result.outcome == execution_pb2.EXECUTION_OUTCOME_CANCELLED
    assert result.failure_code == "cancelled"  # the reason of every outcome but SUCCEEDED
    record = stubs.elicitation.GetRound(
        elicitation_service_pb2.GetRoundRequest(round_id=pending.round_id)
    ).round
    assert record.status == elicitation_pb2.MANAGED_INPUT_STATUS_FAILED
    # Cancel is idempotent.
    again = stubs.executions.Cancel(execution_service_pb2.CancelRequest(execution_id=execution_id))
    assert again.state.outcome == execution_pb2.EXECUTION_OUTCOME_CANCELLED


def test_health(shared_server: ServerProcess, stubs: Stubs) -> None:
    health = health_pb2_grpc.HealthStub(stubs.channel)
    for service in ("", "m3.v1.ExecutionService", "m3.v1.ElicitationService"):
        response = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
        assert response.status == health_pb2.HealthCheckResponse.SERVING


def test_reflection(stubs: Stubs) -> None:
    database = ProtoReflectionDescriptorDatabase(stubs.channel)
    services = set(database.get_services())
    assert {"m3.v1.ExecutionService", "m3.v1.ElicitationService", "grpc.health.v1.Health"} <= (
        services
    )
    pool = descriptor_pool.DescriptorPool(database)
    service = pool.FindServiceByName("m3.v1.ExecutionService")
    assert {m.name for m in service.methods} == {
        "Submit",
        "Snapshot",
        "Result",
        "Cancel",
        "WatchPending",
        "ListServers",
    }
    assert pool.FindMessageTypeByName("m3.v1.PendingElicitationRound").fields_by_name["round_id"]
