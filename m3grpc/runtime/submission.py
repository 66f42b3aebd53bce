"""Checks a submission before anything is stored: ModelValidationError on bad input."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, cast

from pydantic import TypeAdapter, ValidationError

from m3grpc.clipping import clip
from m3grpc.errors import FieldViolation, ModelValidationError
from m3grpc.runtime.limits import (
    MAX_REQUEST_ID_CHARS,
    Limits,
    id_violations,
    spec_violations,
)
from m3grpc.specs import AgentSpec, ExecutionSpec, OperationSpec
from m3grpc.types import HumanInput

_SPEC = TypeAdapter[AgentSpec | OperationSpec](ExecutionSpec)
HUMAN_INPUT_VALUES = ("fail", "managed")


def parse_spec(spec: object) -> AgentSpec | OperationSpec:
    """A spec model from a model or its JSON-like mapping."""
    if isinstance(spec, AgentSpec | OperationSpec):
        return spec
    try:
        return _SPEC.validate_python(spec)
    except ValidationError as exc:
        raise ModelValidationError(
            "invalid execution spec",
            field_violations=[
                FieldViolation(_field_path(error["loc"]), error["msg"]) for error in exc.errors()
            ],
        ) from None


def _field_path(loc: tuple[int | str, ...]) -> str:
    # pydantic puts the union's tag ("agent"/"operation") first; callers never wrote it.
    parts = list(loc[1:] if loc and loc[0] in ("agent", "operation") else loc)
    path = ""
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "spec"


def validate_submission(
    spec: object,
    human_input: object,
    *,
    persistent_store: bool,
    harnesses: Collection[str],
    limits: Limits | None = None,
    request_id: str | None = None,
) -> tuple[AgentSpec | OperationSpec, HumanInput]:
    """The parsed spec and human_input, or ModelValidationError listing every problem.

    With `limits`, sizes are checked first, before the spec is parsed."""
    violations: list[FieldViolation] = []
    if human_input not in HUMAN_INPUT_VALUES:
        violations.append(
            FieldViolation(
                "human_input", f"must be one of {HUMAN_INPUT_VALUES}, got {clip(human_input)}"
            )
        )
    if request_id:
        violations += id_violations(request_id, "request_id", MAX_REQUEST_ID_CHARS)
    if limits is not None:
        document = (
            spec.model_dump(mode="json") if isinstance(spec, AgentSpec | OperationSpec) else spec
        )
        if isinstance(document, Mapping):
            violations += spec_violations(document, limits)
    if violations:
        raise ModelValidationError("invalid submission", field_violations=violations)
    parsed = parse_spec(spec)
    if human_input == "managed":
        if not isinstance(parsed, AgentSpec):
            violations.append(FieldViolation("spec", "managed input is valid for AgentSpec only"))
        elif parsed.elicitation_plan is not None:
            violations.append(
                FieldViolation(
                    "elicitation_plan",
                    "an AgentSpec with an elicitation plan cannot use managed input",
                )
            )
        if not persistent_store:
            violations.append(
                FieldViolation("store", "managed input requires a persistent execution store")
            )
    if isinstance(parsed, AgentSpec):
        if parsed.harness not in harnesses:
            violations.append(
                FieldViolation(
                    "harness", f"unknown harness {clip(parsed.harness)}; known: {sorted(harnesses)}"
                )
            )
        for index, entry in enumerate(parsed.tools):
            server, sep, tool = entry.partition(":")
            if not (server and sep and tool):
                violations.append(FieldViolation(f"tools[{index}]", "must look like 'server:tool'"))
            elif server != parsed.server.name:
                violations.append(
                    FieldViolation(
                        f"tools[{index}]",
                        f"server {clip(server)} is not the bound server {parsed.server.name!r}",
                    )
                )
    if violations:
        raise ModelValidationError("invalid submission", field_violations=violations)
    return parsed, cast(HumanInput, human_input)


def spec_document(spec: AgentSpec | OperationSpec) -> dict[str, Any]:
    return spec.model_dump(mode="json")
