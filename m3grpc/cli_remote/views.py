"""Human-readable text for the verbs' results (the `--json` output is the documents)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from m3grpc.cli_remote.form_fields import form_fields
from m3grpc.types import (
    ElicitationRequest,
    ExecutionResult,
    ExecutionState,
    FormElicitationRequest,
    PendingElicitationRound,
)
from m3grpc.wire.events import ExecutionFinished, RoundLeftPending, RoundPending, WatchEvent


def _when(value: datetime | str | None) -> str:
    if value is None:
        return "-"
    text = value.isoformat() if isinstance(value, datetime) else value
    return text.replace("+00:00", "Z")


def _rows(pairs: list[tuple[str, str]]) -> str:
    width = max(len(label) for label, _ in pairs)
    return "\n".join(f"{label.ljust(width)}  {value}" for label, value in pairs)


def state_text(state: ExecutionState) -> str:
    pairs = [
        ("execution", state.execution_id),
        ("lifecycle", state.lifecycle.value),
        ("outcome", state.outcome.value if state.outcome is not None else "-"),
        ("human input", state.human_input),
        ("created", _when(state.created_at)),
        ("updated", _when(state.updated_at)),
        ("finished", _when(state.finished_at)),
    ]
    if state.failure_code:
        pairs.append(("failure", f"{state.failure_code}: {state.failure_message or ''}"))
    return _rows(pairs)


def result_text(result: ExecutionResult) -> str:
    pairs = [
        ("execution", result.execution_id),
        ("outcome", result.outcome.value),
        ("finished", _when(result.finished_at)),
    ]
    if result.failure_code:
        pairs.append(("failure", f"{result.failure_code}: {result.failure_message or ''}"))
    lines = [_rows(pairs), f"operations ({len(result.operations)}):"]
    for operation in result.operations:
        status = "ok" if operation.ok else f"failed {operation.failure_code or ''}".rstrip()
        lines.append(
            f"  {operation.operation_kind} {operation.operation_name} "
            f"on {operation.server}: {status}"
        )
        text = _result_text(operation.result)
        if text:
            lines.extend(f"    {line}" for line in text.splitlines())
        elif operation.failure_message:
            lines.append(f"    {operation.failure_message}")
    if result.agent is not None and result.agent.final_message:
        lines.append(f"agent final message: {result.agent.final_message}")
    return "\n".join(lines)


def _result_text(result: Mapping[str, Any] | None) -> str:
    """The text parts of an MCP result (tool content, prompt messages), else nothing."""
    if not result:
        return ""
    parts: list[str] = []
    for item in result.get("content") or ():
        if isinstance(item, Mapping) and isinstance(item.get("text"), str):
            parts.append(item["text"])
    for message in result.get("messages") or ():
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, Mapping) and isinstance(content.get("text"), str):
            parts.append(content["text"])
    for item in result.get("contents") or ():
        if isinstance(item, Mapping) and isinstance(item.get("text"), str):
            parts.append(item["text"])
    return "\n".join(parts)


def request_text(key: str, request: ElicitationRequest | Mapping[str, Any]) -> list[str]:
    """A request and, for a form, its fields: name, type, required, default, choices."""
    if isinstance(request, Mapping):
        mode, message = request.get("mode"), request.get("message", "")
        schema = request.get("requested_schema") or {}
        url = request.get("url")
    else:
        mode, message = request.mode, request.message
        schema = request.requested_schema if isinstance(request, FormElicitationRequest) else {}
        url = getattr(request, "url", None)
    lines = [f"request {key} ({mode}): {message}"]
    if mode == "url":
        lines.append(f"  url: {url}")
        return lines
    for field in form_fields(schema):
        line = f"  {field.name}: {field.summary()}"
        if field.choices:
            line += "; one of " + ", ".join(choice.value for choice in field.choices)
        if field.description:
            line += f" - {field.description}"
        lines.append(line)
    return lines


def pending_text(
    pending: PendingElicitationRound, index: int | None = None, limit: int | None = None
) -> str:
    asked = f"{pending.operation_kind} {pending.operation_name} on {pending.server}"
    if index is not None:
        asked += f" (round {index + 1} of at most {limit})"
    pairs = [
        ("round", pending.round_id),
        ("execution", pending.execution_id),
        ("asked by", asked),
        ("created", _when(pending.created_at)),
        ("deadline", _when(pending.deadline)),
    ]
    lines = [_rows(pairs)]
    for key, request in pending.requests.items():
        lines.extend(request_text(key, request))
    return "\n".join(lines)


def round_text(document: Mapping[str, Any]) -> str:
    """`rounds get`: a round document (rounds.round_document)."""
    pairs = [
        ("round", document["round_id"]),
        ("execution", document["execution_id"]),
        ("status", document["status"] or "-"),
        (
            "asked by",
            f"{document['operation_kind']} {document['operation_name']} on {document['server']} "
            f"(round {document['round_index'] + 1} of at most {document['round_limit']})",
        ),
        ("created", _when(document["created_at"])),
        ("updated", _when(document["updated_at"])),
        ("deadline", _when(document["deadline"])),
        ("deliveries", str(document["delivery_attempts"])),
    ]
    for label, key in (
        ("answered", "response_validated_at"),
        ("delivering", "delivery_started_at"),
        ("delivered", "delivered_at"),
        ("resolved", "resolved_at"),
        ("failed", "failed_at"),
    ):
        if document[key] is not None:
            pairs.append((label, _when(document[key])))
    if document["failure_code"]:
        pairs.append(("failure", f"{document['failure_code']}: {document['failure_message']}"))
    lines = [_rows(pairs)]
    for key, request in document["requests"].items():
        lines.extend(request_text(key, request))
    responses = document["responses"]
    if responses is not None:
        lines.append(f"answered with idempotency key {responses['idempotency_key']}:")
        for key, response in responses["responses"].items():
            keys = ", ".join(response["content_keys"]) or "no content"
            lines.append(f"  {key}: {response['action']} ({keys})")
    return "\n".join(lines)


def rounds_table(documents: Sequence[Mapping[str, Any]]) -> str:
    header = ("ROUND", "EXECUTION", "STATUS", "#", "CREATED", "REQUESTS")
    rows = [
        (
            d["round_id"],
            d["execution_id"],
            d["status"] or "-",
            str(d["round_index"] + 1),
            _when(d["created_at"]),
            ",".join(d["requests"]),
        )
        for d in documents
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    )


def event_text(event: WatchEvent) -> str:
    if isinstance(event, RoundPending):
        round_ = event.round
        keys = ", ".join(
            f"{key} ({request.mode}): {request.message}" for key, request in round_.requests.items()
        )
        return (
            f"round pending       {round_.round_id}  execution {round_.execution_id}  "
            f"{round_.operation_kind} {round_.operation_name}  {keys}"
        )
    if isinstance(event, RoundLeftPending):
        return (
            f"round left pending  {event.round_id}  execution {event.execution_id}  "
            f"status {event.status.value}"
        )
    assert isinstance(event, ExecutionFinished)
    state = event.state
    outcome = state.outcome.value if state.outcome is not None else "-"
    failure = f" ({state.failure_code})" if state.failure_code else ""
    return f"execution finished  {state.execution_id}  outcome {outcome}{failure}"


def event_document(event: WatchEvent) -> dict[str, Any]:
    if isinstance(event, RoundPending):
        return {
            "event": "round_pending",
            "cursor": event.cursor,
            "round": event.round.model_dump(mode="json"),
            "round_index": event.round_index,
            "round_limit": event.round_limit,
        }
    if isinstance(event, RoundLeftPending):
        return {
            "event": "round_left_pending",
            "cursor": event.cursor,
            "round_id": event.round_id,
            "execution_id": event.execution_id,
            "status": event.status.value,
        }
    return {
        "event": "execution_finished",
        "cursor": event.cursor,
        "state": event.state.model_dump(mode="json"),
    }
