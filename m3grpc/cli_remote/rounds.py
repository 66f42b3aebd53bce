"""GetRound and ListRounds (the operator's redacted view of rounds) for the CLI,
and that view as a JSON document in the model's conventions (snake_case, enum
values in lower case, times in ISO 8601) like the other verbs' output.

The remote client has no methods for these diagnostics RPCs yet; this calls the
generated stub on its own channel and raises the client's typed errors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any

import grpc

from m3grpc.client.calls import Connection
from m3grpc.types import ManagedInputStatus
from m3grpc.wire import convert, messages
from m3grpc.wire.gen.m3.v1 import (
    elicitation_pb2,
    elicitation_service_pb2,
    elicitation_service_pb2_grpc,
)
from m3grpc.wire.status import typed_error


class RoundsClient:
    def __init__(
        self, target: str, *, timeout: float | None, connection: Connection | None = None
    ) -> None:
        connection = connection or Connection.of(None, None, None)
        self._channel = connection.sync_channel(target)
        self._metadata = connection.call_metadata()
        self._stub = elicitation_service_pb2_grpc.ElicitationServiceStub(self._channel)  # type: ignore[no-untyped-call]
        self._timeout = timeout

    def __enter__(self) -> RoundsClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._channel.close()

    def get(self, round_id: str) -> elicitation_pb2.ElicitationRound:
        request = elicitation_service_pb2.GetRoundRequest(round_id=round_id)
        response: elicitation_service_pb2.GetRoundResponse = self._call(
            self._stub.GetRound, request
        )
        return response.round

    def list(
        self,
        *,
        execution_id: str | None,
        statuses: Sequence[ManagedInputStatus],
        page_size: int,
        page_token: str,
    ) -> elicitation_service_pb2.ListRoundsResponse:
        request = elicitation_service_pb2.ListRoundsRequest(
            page_size=page_size,
            page_token=page_token,
            execution_id=execution_id or "",
            statuses=[convert.MANAGED_INPUT_STATUS.wire(status.value) for status in statuses],
        )
        response: elicitation_service_pb2.ListRoundsResponse = self._call(
            self._stub.ListRounds, request
        )
        return response

    def _call(self, method: Callable[..., Any], request: Any) -> Any:
        try:
            return method(request, timeout=self._timeout, metadata=self._metadata)
        except grpc.RpcError as error:
            raise typed_error(error) from error


_TIMES = (
    ("created_at", "create_time"),
    ("updated_at", "update_time"),
    ("deadline", "deadline"),
    ("response_validated_at", "response_validate_time"),
    ("delivery_started_at", "delivery_start_time"),
    ("delivered_at", "deliver_time"),
    ("resolved_at", "resolve_time"),
    ("failed_at", "fail_time"),
)


def round_document(message: elicitation_pb2.ElicitationRound) -> dict[str, Any]:
    """A round of GetRound/ListRounds as JSON: never response content, only the
    actions and content keys the service reports."""
    document: dict[str, Any] = {
        "round_id": message.round_id,
        "execution_id": message.execution_id,
        "logical_operation_id": message.logical_operation_id,
        "server": message.server,
        "operation_kind": convert.operation_kind(message.operation_kind),
        "operation_name": message.operation_name,
        "round_index": message.round_index,
        "round_limit": message.round_limit,
        "status": convert.MANAGED_INPUT_STATUS.model(message.status),
        "requests": {
            key: messages.request_model(request).model_dump(mode="json", exclude_none=True)
            for key, request in sorted(message.requests.items())
        },
        "responses": None,
        "delivery_attempts": message.delivery_attempts,
    }
    if message.HasField("responses"):
        redacted = message.responses
        document["responses"] = {
            "idempotency_key": redacted.idempotency_key or None,
            "digest": redacted.digest or None,
            "responses": {
                key: {
                    "action": convert.ACTION.model(value.action),
                    "content_keys": list(value.content_keys),
                }
                for key, value in sorted(redacted.responses.items())
            },
        }
    for name, field in _TIMES:
        when: datetime | None = convert.optional_timestamp(message, field)
        document[name] = when.isoformat() if when is not None else None
    document["failure_code"] = message.failure_code or None
    document["failure_message"] = message.failure_message or None
    return document
