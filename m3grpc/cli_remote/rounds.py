"""A round of GetRound/ListRounds (the remote kit's `get_round` / `list_rounds`) as
the `rounds` verbs print it: a JSON document in the model's conventions (snake_case,
enum values in lower case, times in ISO 8601) like the other verbs' output."""

from __future__ import annotations

from typing import Any

from m3grpc.types import RoundView

_TIMES = (
    "created_at",
    "updated_at",
    "deadline",
    "response_validated_at",
    "delivery_started_at",
    "delivered_at",
    "resolved_at",
    "failed_at",
)


def round_document(view: RoundView) -> dict[str, Any]:
    """A round as JSON: never response content, only the actions and content keys
    the service reports."""
    document: dict[str, Any] = {
        "round_id": view.round_id,
        "execution_id": view.execution_id,
        "logical_operation_id": view.logical_operation_id,
        "server": view.server,
        "operation_kind": view.operation_kind,
        "operation_name": view.operation_name,
        "round_index": view.round_index,
        "round_limit": view.round_limit,
        "status": view.status.value,
        "requests": {
            key: request.model_dump(mode="json", exclude_none=True)
            for key, request in sorted(view.requests.items())
        },
        "responses": None,
        "delivery_attempts": view.delivery_attempts,
    }
    if view.responses is not None:
        redacted = view.responses
        document["responses"] = {
            "idempotency_key": redacted.idempotency_key,
            "digest": redacted.digest,
            "responses": {
                key: {"action": action, "content_keys": list(redacted.content_keys[key])}
                for key, action in sorted(redacted.actions.items())
            },
        }
    for name in _TIMES:
        when = getattr(view, name)
        document[name] = when.isoformat() if when is not None else None
    document["failure_code"] = view.failure_code
    document["failure_message"] = view.failure_message
    return document
