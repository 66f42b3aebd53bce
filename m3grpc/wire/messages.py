"""Domain models <-> m3.v1 messages: rounds, responses, execution states and results.

The server builds messages from models; the remote client builds models from
messages, so a remote caller gets the same pydantic types as an embedded one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from m3grpc import fieldpath
from m3grpc.errors import FieldViolation, ManagedInputValidationError
from m3grpc.types import (
    AgentReport,
    ElicitationRequest,
    ElicitationResponse,
    ExecutionOutcome,
    ExecutionResult,
    ExecutionState,
    ExecutionStatus,
    FormElicitationRequest,
    HumanInput,
    ManagedInputRecord,
    ManagedInputStatus,
    NativePrompt,
    OperationResult,
    PendingElicitationRound,
    RedactedResponses,
    RoundPage,
    RoundView,
    UrlElicitationRequest,
)
from m3grpc.wire import convert
from m3grpc.wire.gen.m3.v1 import elicitation_pb2, elicitation_service_pb2, execution_pb2

# -- elicitation requests ---------------------------------------------------------


def request_message(request: ElicitationRequest) -> elicitation_pb2.ElicitationRequest:
    message = elicitation_pb2.ElicitationRequest()
    if isinstance(request, FormElicitationRequest):
        message.form.message = request.message
        message.form.requested_schema.CopyFrom(convert.dict_to_struct(request.requested_schema))
    else:
        message.url.message = request.message
        message.url.url = request.url
        message.url.elicitation_id = request.elicitation_id
    if request.meta is not None:
        message.meta.CopyFrom(convert.dict_to_struct(request.meta))
    if request.task is not None:
        message.task.CopyFrom(convert.dict_to_struct(request.task))
    if request.server is not None:
        message.server = request.server
    if request.operation_kind is not None:
        message.operation_kind = convert.OPERATION_KIND.wire(request.operation_kind)
    if request.operation_name is not None:
        message.operation_name = request.operation_name
    return message


def request_model(message: elicitation_pb2.ElicitationRequest) -> ElicitationRequest:
    context: dict[str, Any] = {
        "meta": convert.optional_struct(message, "meta"),
        "task": convert.optional_struct(message, "task"),
        "server": message.server if message.HasField("server") else None,
        "operation_kind": convert.operation_kind(message.operation_kind),
        "operation_name": message.operation_name if message.HasField("operation_name") else None,
    }
    if message.WhichOneof("mode") == "url":
        return UrlElicitationRequest(
            message=message.url.message,
            url=message.url.url,
            elicitation_id=message.url.elicitation_id,
            **context,
        )
    return FormElicitationRequest(
        message=message.form.message,
        requested_schema=convert.struct_to_dict(message.form.requested_schema),
        **context,
    )


# -- rounds -------------------------------------------------------------------------


def _round_fields(record: ManagedInputRecord) -> dict[str, Any]:
    """What both round messages say of a round: its IDs, its operation, its place."""
    pending = record.pending
    return {
        "round_id": pending.round_id,
        "execution_id": pending.execution_id,
        "logical_operation_id": pending.logical_operation_id,
        "server": pending.server,
        "operation_kind": convert.OPERATION_KIND.wire(pending.operation_kind),
        "operation_name": pending.operation_name,
        "round_index": record.round_index,
        "round_limit": record.round_limit,
    }


def pending_round_message(record: ManagedInputRecord) -> elicitation_pb2.PendingElicitationRound:
    pending = record.pending
    message = elicitation_pb2.PendingElicitationRound(
        **_round_fields(record), create_time=convert.timestamp(pending.created_at)
    )
    for key, request in pending.requests.items():
        message.requests[key].CopyFrom(request_message(request))
    if pending.deadline is not None:
        message.deadline.CopyFrom(convert.timestamp(pending.deadline))
    if pending.request_state is not None:
        message.request_state = pending.request_state
    return message


def pending_round_model(
    message: elicitation_pb2.PendingElicitationRound,
) -> PendingElicitationRound:
    return PendingElicitationRound(
        round_id=message.round_id,
        execution_id=message.execution_id,
        logical_operation_id=message.logical_operation_id,
        server=message.server,
        operation_kind=convert.operation_kind(message.operation_kind) or "tool",
        operation_name=message.operation_name,
        requests={key: request_model(value) for key, value in message.requests.items()},
        created_at=convert.from_timestamp(message.create_time),
        request_state=message.request_state if message.HasField("request_state") else None,
        deadline=convert.optional_timestamp(message, "deadline"),
    )


def elicitation_round_message(
    record: ManagedInputRecord, redacted: RedactedResponses | None
) -> elicitation_pb2.ElicitationRound:
    """The operator's view of a round (GetRound, ListRounds): responses redacted
    (`redacted`, the store's projection of the record: actions and content keys,
    never content values), no lease token, no request_state. Server side only."""
    pending = record.pending
    message = elicitation_pb2.ElicitationRound(
        **_round_fields(record),
        status=convert.MANAGED_INPUT_STATUS.wire(record.status),
        delivery_attempts=record.delivery_attempts,
        create_time=convert.timestamp(record.created_at),
        update_time=convert.timestamp(record.updated_at),
        failure_code=record.failure_code or "",
        failure_message=record.failure_message or "",
    )
    for key, request in pending.requests.items():
        message.requests[key].CopyFrom(request_message(request))
    if record.responses is not None and redacted is not None:
        message.responses.idempotency_key = redacted.idempotency_key or ""
        message.responses.digest = redacted.digest or ""
        for key, action in redacted.actions.items():
            message.responses.responses[key].action = convert.ACTION.wire(action)
            message.responses.responses[key].content_keys.extend(redacted.content_keys[key])
    for field, value in (
        ("deadline", pending.deadline),
        ("response_validate_time", record.response_validated_at),
        ("delivery_start_time", record.delivery_started_at),
        ("deliver_time", record.delivered_at),
        ("resolve_time", record.resolved_at),
        ("fail_time", record.failed_at),
    ):
        if value is not None:
            getattr(message, field).CopyFrom(convert.timestamp(value))
    return message


_ROUND_TIMES = (
    ("deadline", "deadline"),
    ("response_validated_at", "response_validate_time"),
    ("delivery_started_at", "delivery_start_time"),
    ("delivered_at", "deliver_time"),
    ("resolved_at", "resolve_time"),
    ("failed_at", "fail_time"),
)


def round_view_model(message: elicitation_pb2.ElicitationRound) -> RoundView:
    """The operator's view of a round as the client reads it (GetRound, ListRounds)."""
    status = managed_input_status_model(message.status)
    if status is None:
        raise ValueError(f"round {message.round_id} has a status this client does not know")
    responses = None
    if message.HasField("responses"):
        redacted = message.responses
        responses = RedactedResponses.model_validate(
            {
                "round_id": message.round_id,
                "status": status,
                "idempotency_key": redacted.idempotency_key or None,
                "actions": {
                    key: convert.ACTION.model(value.action)
                    for key, value in redacted.responses.items()
                },
                "content_keys": {
                    key: tuple(value.content_keys) for key, value in redacted.responses.items()
                },
                "digest": redacted.digest or None,
            }
        )
    times = {name: convert.optional_timestamp(message, field) for name, field in _ROUND_TIMES}
    return RoundView(
        round_id=message.round_id,
        execution_id=message.execution_id,
        logical_operation_id=message.logical_operation_id,
        server=message.server,
        operation_kind=convert.operation_kind(message.operation_kind),
        operation_name=message.operation_name,
        round_index=message.round_index,
        round_limit=message.round_limit,
        status=status,
        requests={key: request_model(value) for key, value in message.requests.items()},
        responses=responses,
        delivery_attempts=message.delivery_attempts,
        created_at=convert.from_timestamp(message.create_time),
        updated_at=convert.from_timestamp(message.update_time),
        failure_code=message.failure_code or None,
        failure_message=message.failure_message or None,
        **times,
    )


def round_page_model(message: elicitation_service_pb2.ListRoundsResponse) -> RoundPage:
    return RoundPage(
        rounds=tuple(round_view_model(item) for item in message.rounds),
        next_page_token=message.next_page_token or None,
    )


# -- responses ------------------------------------------------------------------------


def response_message(response: ElicitationResponse) -> elicitation_pb2.ElicitationResponse:
    message = elicitation_pb2.ElicitationResponse(action=convert.ACTION.wire(response.action))
    if response.content is not None:
        message.content.CopyFrom(convert.dict_to_struct(response.content))
    return message


def responses_model(
    messages: Mapping[str, elicitation_pb2.ElicitationResponse],
) -> dict[str, ElicitationResponse]:
    """The response map of a RespondRequest; an unset or unknown action, or content
    JSON cannot hold, is a field violation."""
    responses: dict[str, ElicitationResponse] = {}
    violations: list[FieldViolation] = []
    for key, message in messages.items():
        path = "responses" + fieldpath.key(key)
        action = convert.ACTION.model(message.action)
        if message.action == elicitation_pb2.ELICITATION_ACTION_UNSPECIFIED:
            violations.append(FieldViolation(f"{path}.action", "must be set"))
        elif action is None:
            violations.append(
                FieldViolation(f"{path}.action", convert.unknown_enum(message.action))
            )
        try:
            content = convert.optional_struct(message, "content")
        except convert.WireValueError as exc:
            violations.append(FieldViolation(f"{path}.content{exc.path}", exc.description))
            continue
        if action is not None:
            responses[key] = ElicitationResponse.model_validate(
                {"action": action, "content": content}
            )
    if violations:
        raise ManagedInputValidationError("invalid responses", field_violations=violations)
    return responses


# -- executions -----------------------------------------------------------------------


def state_message(state: ExecutionState) -> execution_pb2.ExecutionState:
    message = execution_pb2.ExecutionState(
        execution_id=state.execution_id,
        lifecycle=convert.EXECUTION_STATUS.wire(state.lifecycle),
        human_input=convert.HUMAN_INPUT.wire(state.human_input),
        create_time=convert.timestamp(state.created_at),
        update_time=convert.timestamp(state.updated_at),
        failure_code=state.failure_code or "",
        failure_message=state.failure_message or "",
    )
    if state.outcome is not None:
        message.outcome = convert.OUTCOME.wire(state.outcome)
    if state.finished_at is not None:
        message.finish_time.CopyFrom(convert.timestamp(state.finished_at))
    return message


def state_model(message: execution_pb2.ExecutionState) -> ExecutionState:
    outcome = convert.OUTCOME.model(message.outcome)
    return ExecutionState(
        execution_id=message.execution_id,
        lifecycle=ExecutionStatus(convert.EXECUTION_STATUS.model(message.lifecycle) or "queued"),
        outcome=ExecutionOutcome(outcome) if outcome is not None else None,
        human_input=cast(HumanInput, convert.HUMAN_INPUT.model(message.human_input) or "fail"),
        created_at=convert.from_timestamp(message.create_time),
        updated_at=convert.from_timestamp(message.update_time),
        finished_at=convert.optional_timestamp(message, "finish_time"),
        failure_code=message.failure_code or None,
        failure_message=message.failure_message or None,
    )


def _operation_message(result: OperationResult) -> execution_pb2.OperationResult:
    message = execution_pb2.OperationResult(
        logical_operation_id=result.logical_operation_id,
        server=result.server,
        operation_kind=convert.OPERATION_KIND.wire(result.operation_kind),
        operation_name=result.operation_name,
        ok=result.ok,
        failure_code=result.failure_code or "",
        failure_message=result.failure_message or "",
    )
    if result.result is not None:
        message.result.CopyFrom(convert.dict_to_struct(result.result))
    return message


def _operation_model(message: execution_pb2.OperationResult) -> OperationResult:
    return OperationResult(
        logical_operation_id=message.logical_operation_id,
        server=message.server,
        operation_kind=convert.operation_kind(message.operation_kind) or "tool",
        operation_name=message.operation_name,
        ok=message.ok,
        result=convert.optional_struct(message, "result"),
        failure_code=message.failure_code or None,
        failure_message=message.failure_message or None,
    )


def _agent_message(report: AgentReport) -> execution_pb2.AgentReport:
    return execution_pb2.AgentReport(
        harness=report.harness,
        model=report.model or "",
        session_id=report.session_id or "",
        turn_id=report.turn_id or "",
        turn_status=report.turn_status or "",
        final_message=report.final_message or "",
        token_usage=dict(report.token_usage or {}),
        native_prompts=[
            execution_pb2.NativePrompt(
                kind=prompt.kind, allowed=prompt.decision == "allow", detail=prompt.detail or ""
            )
            for prompt in report.native_prompts
        ],
    )


def _agent_model(message: execution_pb2.AgentReport) -> AgentReport:
    return AgentReport(
        harness=message.harness,
        model=message.model or None,
        session_id=message.session_id or None,
        turn_id=message.turn_id or None,
        turn_status=message.turn_status or None,
        final_message=message.final_message or None,
        token_usage=dict(message.token_usage) or None,
        native_prompts=tuple(
            NativePrompt(
                kind=prompt.kind,
                decision="allow" if prompt.allowed else "deny",
                detail=prompt.detail or None,
            )
            for prompt in message.native_prompts
        ),
    )


def result_message(result: ExecutionResult) -> execution_pb2.ExecutionResult:
    message = execution_pb2.ExecutionResult(
        execution_id=result.execution_id,
        outcome=convert.OUTCOME.wire(result.outcome),
        operations=[_operation_message(op) for op in result.operations],
        failure_code=result.failure_code or "",
        failure_message=result.failure_message or "",
        finish_time=convert.timestamp(result.finished_at),
    )
    if result.agent is not None:
        message.agent.CopyFrom(_agent_message(result.agent))
    return message


def result_model(message: execution_pb2.ExecutionResult) -> ExecutionResult:
    return ExecutionResult(
        execution_id=message.execution_id,
        outcome=ExecutionOutcome(convert.OUTCOME.model(message.outcome) or "failed"),
        operations=tuple(_operation_model(op) for op in message.operations),
        failure_code=message.failure_code or None,
        failure_message=message.failure_message or None,
        finished_at=convert.from_timestamp(message.finish_time),
        agent=_agent_model(message.agent) if message.HasField("agent") else None,
    )


def managed_input_status_model(number: int) -> ManagedInputStatus | None:
    value = convert.MANAGED_INPUT_STATUS.model(number)
    return ManagedInputStatus(value) if value is not None else None
