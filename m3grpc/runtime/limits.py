"""Input limits, checked before anything is stored.

Every limit exists so that no accepted input can make a later call fail: an
ID too long for its column or for an error's metadata, a spec whose tool
list costs seconds to process, an answer so large that the execution's
Result no longer fits in a gRPC message (4 MB by default). Violations are
reported with model field names (`prompt`, `tools`, `responses['k'].content`);
the api layer maps them to request paths.

Lengths of IDs and keys are fixed by the schema's columns; the size limits
are operator settings (`[limits]` in the service's TOML config).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from m3grpc.clipping import clip
from m3grpc.errors import FieldViolation, ManagedInputValidationError
from m3grpc.text import text_problem
from m3grpc.types import ElicitationResponse, ExecutionResult, OperationResult

# Execution and round IDs (the service issues 36-character ones).
MAX_ID_CHARS = 128
# The request fields that hold an ID (a malformed one is MANAGED_INPUT_INVALID on
# every RPC); request_id and idempotency_key are keys, checked with their request.
ID_FIELDS = frozenset({"execution_id", "round_id"})
# request_id and idempotency_key are stored in 200-character columns.
MAX_REQUEST_ID_CHARS = 200
MAX_IDEMPOTENCY_KEY_CHARS = 200
# A request key of a response map (the service's keys are short snake_case).
MAX_REQUEST_KEY_CHARS = 200
# What a stored failure message keeps (harness and MCP server errors).
MAX_FAILURE_MESSAGE_CHARS = 4000


@dataclass(frozen=True)
class Limits:
    """Size limits of accepted input (each checked before anything is stored)."""

    max_prompt_chars: int = 100_000
    max_tools: int = 1_000
    max_script_steps: int = 1_000
    # The whole spec as JSON (arguments, plan content, ...).
    max_spec_bytes: int = 1_000_000
    # Nesting depth of any JSON value a caller sends (arguments, content).
    max_json_depth: int = 20
    # Request keys in one response map.
    max_request_keys: int = 100
    # All content of one round's responses, as JSON. Records stay far below the
    # 4 MB message limit: a page of ListRounds and an execution's Result too.
    max_response_content_bytes: int = 262_144
    # The longest round_timeout a spec may ask for; None: no maximum.
    max_round_timeout_seconds: float | None = None
    # A stored ExecutionResult: each operation's result, and all of them (bytes
    # as JSON or as protobuf, whichever is larger).
    max_operation_result_bytes: int = 262_144
    max_result_bytes: int = 2_000_000


def id_violations(value: object, field: str, limit: int = MAX_ID_CHARS) -> list[FieldViolation]:
    """What breaks the one rule for IDs and callers' keys (docs/reference/identifiers.md):
    a non-empty string, not only whitespace, at most `limit` characters, of text a
    store can keep (`m3grpc.text`). The description never repeats the value."""
    if not isinstance(value, str) or not value:
        return [FieldViolation(field, "must be a non-empty string")]
    if len(value) > limit:
        return [FieldViolation(field, f"must be at most {limit} characters, got {len(value)}")]
    if not value.strip():
        return [FieldViolation(field, "must not be blank (only whitespace)")]
    if problem := text_problem(value):
        return [FieldViolation(field, problem)]
    return []


def checked_id(value: object, field: str, limit: int = MAX_ID_CHARS) -> str:
    """`value` if it keeps the rule of `id_violations`, else ManagedInputValidationError
    (INVALID_ARGUMENT, MANAGED_INPUT_INVALID) naming `field`: checked before anything
    is read, so a malformed ID is never looked up (nor reported NOT_FOUND)."""
    if violations := id_violations(value, field, limit):
        raise ManagedInputValidationError(f"invalid {field}", field_violations=violations)
    assert isinstance(value, str)
    return value


def json_depth(value: object) -> int:
    """Nesting depth of a JSON-like value (a scalar is 0), without recursion, so a
    hostile depth cannot exhaust the stack."""
    depth = 0
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        children: Iterable[object]
        if isinstance(item, Mapping):
            children = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        depth = max(depth, level + 1)
        stack.extend((child, level + 1) for child in children)
    return depth


def json_size(value: object) -> int:
    """Bytes of `value` as compact JSON (call after bounding its depth)."""
    return len(json.dumps(value, separators=(",", ":"), default=str).encode())


def encoded_size(value: object, *, stop_above: int | None = None) -> int:
    """An upper bound of `value`'s size both as JSON and as a protobuf Struct, whose
    numbers take 9 bytes and every nesting a few more (iterative, like json_depth).
    With `stop_above`, the walk ends as soon as the size exceeds it (the size
    returned is then only known to be larger)."""
    size = 0
    stack: list[object] = [value]
    while stack:
        if stop_above is not None and size > stop_above:
            break
        item = stack.pop()
        if isinstance(item, Mapping):
            for key, child in item.items():
                size += len(str(key).encode()) + 8
                stack.append(child)
            size += 6
        elif isinstance(item, list | tuple):
            size += 6 + 2 * len(item)
            stack.extend(item)
        elif isinstance(item, str):
            size += len(item.encode()) + 6
        else:  # numbers, booleans, null: at most a 9-byte field plus its Value
            size += 11 + (len(str(item)) if isinstance(item, int | float) else 0)
    return size


def spec_violations(document: Mapping[str, Any], limits: Limits) -> list[FieldViolation]:
    """Limits of a spec document (`AgentSpec`/`OperationSpec` JSON), cheapest first:
    counts before anything is walked, so an oversized list costs nothing more."""
    violations: list[FieldViolation] = []
    prompt = document.get("prompt")
    if isinstance(prompt, str) and len(prompt) > limits.max_prompt_chars:
        violations.append(
            FieldViolation(
                "prompt",
                f"must be at most {limits.max_prompt_chars} characters, got {len(prompt)}",
            )
        )
    tools = document.get("tools")
    if isinstance(tools, Sequence) and len(tools) > limits.max_tools:
        violations.append(
            FieldViolation("tools", f"at most {limits.max_tools} entries, got {len(tools)}")
        )
    script = document.get("script")
    if isinstance(script, Sequence) and len(script) > limits.max_script_steps:
        violations.append(
            FieldViolation("script", f"at most {limits.max_script_steps} steps, got {len(script)}")
        )
    timeout = document.get("round_timeout_seconds")
    maximum = limits.max_round_timeout_seconds
    if isinstance(timeout, int | float) and maximum is not None and timeout > maximum:
        violations.append(
            FieldViolation("round_timeout_seconds", f"must be at most {maximum:g} seconds")
        )
    if violations:
        return violations
    depth = json_depth(document)
    # The spec's own structure takes a few levels; the rest is the caller's JSON.
    if depth > limits.max_json_depth + 4:
        return [FieldViolation("spec", f"nested deeper than {limits.max_json_depth} levels")]
    size = json_size(document)
    if size > limits.max_spec_bytes:
        return [
            FieldViolation(
                "spec", f"at most {limits.max_spec_bytes} bytes as JSON, got {size} bytes"
            )
        ]
    return []


def response_violations(
    responses: Mapping[str, ElicitationResponse], limits: Limits
) -> list[FieldViolation]:
    """Limits of a response map: how many keys, how long, how much content."""
    if len(responses) > limits.max_request_keys:
        return [
            FieldViolation(
                "responses",
                f"at most {limits.max_request_keys} request keys, got {len(responses)}",
            )
        ]
    violations: list[FieldViolation] = []
    total = 0
    for key, response in responses.items():
        if not isinstance(key, str) or len(key) > MAX_REQUEST_KEY_CHARS:
            violations.append(
                FieldViolation(
                    "responses",
                    f"request key {clip(key)} is longer than {MAX_REQUEST_KEY_CHARS} characters",
                )
            )
            continue
        content = getattr(response, "content", None)
        if content is None:
            continue
        field = f"responses[{key!r}].content"
        if json_depth(content) > limits.max_json_depth:
            violations.append(
                FieldViolation(field, f"nested deeper than {limits.max_json_depth} levels")
            )
            continue
        total += json_size(content)
        if total > limits.max_response_content_bytes:
            violations.append(
                FieldViolation(
                    field,
                    "the responses' content exceeds "
                    f"{limits.max_response_content_bytes} bytes as JSON",
                )
            )
            break
    return violations


def bounded_result(result: ExecutionResult, limits: Limits) -> ExecutionResult:
    """The result as stored: small enough that Result always fits in a reply.

    An MCP server's output larger than the per-operation limit, or past the
    total, is replaced by a note of its size; failure messages are clipped; and
    when the operations themselves add up past the total (a very long script),
    the rest are replaced by one `m3_omitted` entry that counts them. Linear in
    the result's size; the worker runs it off the event loop."""
    bounded: list[OperationResult] = []
    total = 0
    operations = result.operations
    for index, operation in enumerate(operations):
        if total > limits.max_result_bytes:
            omitted = operations[index:]
            bounded.append(
                OperationResult(
                    logical_operation_id="m3_omitted",
                    server=operation.server,
                    operation_kind=operation.operation_kind,
                    operation_name="",
                    ok=all(op.ok for op in omitted),
                    result={
                        "m3_truncated": True,
                        "reason": "the execution's result is too large to store",
                        "omitted_operations": len(omitted),
                    },
                )
            )
            break
        update: dict[str, Any] = {}
        size = 0
        if operation.result is not None:
            size = encoded_size(operation.result)
            if size > limits.max_operation_result_bytes or (total + size > limits.max_result_bytes):
                update["result"] = {
                    "m3_truncated": True,
                    "reason": "the operation's result is too large to store",
                    "size_bytes": size,
                }
                size = 0
        message = operation.failure_message
        if message is not None and len(message) > MAX_FAILURE_MESSAGE_CHARS:
            update["failure_message"] = clip(message, MAX_FAILURE_MESSAGE_CHARS)
        kept = operation.model_copy(update=update) if update else operation
        # Everything but the result payload (counted above): IDs, names, messages.
        total += size + 200 + len(kept.failure_message or "") + len(kept.operation_name)
        bounded.append(kept)
    message = result.failure_message
    return result.model_copy(
        update={
            "operations": tuple(bounded),
            "failure_message": None
            if message is None
            else clip(message, MAX_FAILURE_MESSAGE_CHARS),
        }
    )
