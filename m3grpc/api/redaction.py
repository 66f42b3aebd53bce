"""The operator's view of a round (GetRound, ListRounds): an ElicitationRound
message with the responses redacted: actions and content keys, never content
values; no lease token, no request_state. Server side only.
"""

from __future__ import annotations

from m3grpc.api import convert
from m3grpc.api.gen.m3.v1 import elicitation_pb2
from m3grpc.api.messages import request_message
from m3grpc.storage.managed_input import redact_responses
from m3grpc.types import ManagedInputRecord


def elicitation_round_message(record: ManagedInputRecord) -> elicitation_pb2.ElicitationRound:
    """The operator's view of a round: responses redacted (actions and keys, never
    content values), no lease token, no request_state."""
    pending = record.pending
    message = elicitation_pb2.ElicitationRound(
        round_id=pending.round_id,
        execution_id=pending.execution_id,
        logical_operation_id=pending.logical_operation_id,
        server=pending.server,
        operation_kind=convert.OPERATION_KIND.wire(pending.operation_kind),
        operation_name=pending.operation_name,
        round_index=record.round_index,
        round_limit=record.round_limit,
        status=convert.ROUND_STATUS.wire(record.status),
        delivery_attempts=record.delivery_attempts,
        create_time=convert.timestamp(record.created_at),
        update_time=convert.timestamp(record.updated_at),
        failure_code=record.failure_code or "",
        failure_message=record.failure_message or "",
    )
    for key, request in pending.requests.items():
        message.requests[key].CopyFrom(request_message(request))
    if record.responses is not None:
        # The store's projection, from the record already read (one query per page).
        redacted = redact_responses(record)
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
