"""Request building shared by the sync and async remote clients: the client's
direction of SubmitRequest (the service's: `spec_codec.submission`),
RespondRequest (`messages.responses_model`) and ResultRequest.

Arguments are checked the way the embedded API checks them (same typed
errors); only binding names go on the wire.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Protocol

from pydantic import TypeAdapter, ValidationError

from m3grpc import fieldpath
from m3grpc.errors import FieldViolation, ManagedInputValidationError, ModelValidationError
from m3grpc.specs import AgentSpec, ElicitationPlan, OperationSpec, PermissionPolicy, ScriptStep
from m3grpc.submit_options import SubmitOptions
from m3grpc.types import ElicitationResponse
from m3grpc.waits import wait_seconds
from m3grpc.wire import convert, messages, spec_codec
from m3grpc.wire.gen.m3.v1 import (
    elicitation_service_pb2,
    execution_service_pb2,
)

HUMAN_INPUT_VALUES = ("fail", "managed")
# Result waits get this much longer as the call deadline than the server-side
# timeout, so the typed RESULT_WAIT_TIMEOUT arrives before the call's deadline.
RESULT_DEADLINE_MARGIN = 5.0

_STEPS = TypeAdapter(tuple[ScriptStep, ...])
_PLAN = TypeAdapter(ElicitationPlan)
_POLICY = TypeAdapter(PermissionPolicy)
# The AgentSpec's own bounds: 0 would go on the wire as "unset" (the default).
_ROUND_LIMIT: TypeAdapter[int] = TypeAdapter(Annotated[int, AgentSpec.model_fields["round_limit"]])
# The other arguments an AgentSpec checks, checked the same way before anything is sent.
_PROMPT: TypeAdapter[str] = TypeAdapter(Annotated[str, AgentSpec.model_fields["prompt"]])
_TOOLS: TypeAdapter[tuple[str, ...]] = TypeAdapter(
    Annotated[tuple[str, ...], AgentSpec.model_fields["tools"]]
)
_ROUND_TIMEOUT: TypeAdapter[float | None] = TypeAdapter(
    Annotated[float | None, AgentSpec.model_fields["round_timeout_seconds"]]
)
_RESPONSE = TypeAdapter(ElicitationResponse)


class NamedServer(Protocol):
    @property
    def name(self) -> str: ...


ServerRef = str | NamedServer


def server_name(server: ServerRef) -> str:
    return server if isinstance(server, str) else server.name


def agent_request(
    *,
    prompt: str,
    server: ServerRef,
    harness: str,
    models: Sequence[str],
    options: SubmitOptions,
) -> execution_service_pb2.SubmitRequest:
    script = options.script
    steps = _validated(_STEPS, tuple(script), "script") if script is not None else None
    plan = (
        _validated(_PLAN, options.elicitation_plan, "elicitation_plan")
        if options.elicitation_plan is not None
        else None
    )
    policy: PermissionPolicy = (
        _validated(_POLICY, options.permission_policy, "permission_policy")
        if options.permission_policy is not None
        else PermissionPolicy()
    )
    agent = spec_codec.agent_message(
        prompt=_validated(_PROMPT, prompt, "prompt"),
        server=server_name(server),
        harness=harness,
        models=models,
        tools=_validated(_TOOLS, options.tools, "tools"),
        script=steps,
        elicitation_plan=plan,
        permission_policy=policy.default,
        round_limit=_validated(_ROUND_LIMIT, options.round_limit, "round_limit"),
        round_timeout_seconds=_validated(
            _ROUND_TIMEOUT, options.round_timeout_seconds, "round_timeout_seconds"
        ),
    )
    request = execution_service_pb2.SubmitRequest(agent=agent)
    return _finish(request, options.human_input, options.request_id)


def spec_request(
    spec: AgentSpec | OperationSpec, human_input: str, request_id: str | None
) -> execution_service_pb2.SubmitRequest:
    if not isinstance(spec, AgentSpec | OperationSpec):
        raise ModelValidationError(
            "invalid execution spec",
            field_violations=[FieldViolation("spec", "must be an AgentSpec or OperationSpec")],
        )
    return _finish(spec_codec.spec_request(spec), human_input, request_id)


def _finish(
    request: execution_service_pb2.SubmitRequest, human_input: str, request_id: str | None
) -> execution_service_pb2.SubmitRequest:
    if human_input not in HUMAN_INPUT_VALUES:
        raise ModelValidationError(
            "invalid submission",
            field_violations=[
                FieldViolation(
                    "human_input", f"must be one of {HUMAN_INPUT_VALUES}, got {human_input!r}"
                )
            ],
        )
    request.human_input = convert.HUMAN_INPUT.wire(human_input)
    if request_id:
        request.request_id = request_id
    return request


def respond_request(
    round_id: str,
    responses: Mapping[str, ElicitationResponse | Mapping[str, Any]],
    idempotency_key: str,
    execution_id: str | None = None,
) -> elicitation_service_pb2.RespondRequest:
    """The request; a malformed response map raises ManagedInputValidationError, as
    the embedded handle's `respond_elicitation` and the service do. `execution_id`:
    the execution the round must belong to (the service refuses another's)."""
    parsed = _responses(responses)
    return elicitation_service_pb2.RespondRequest(
        round_id=round_id,
        idempotency_key=idempotency_key,
        execution_id=execution_id or "",
        responses={key: messages.response_message(value) for key, value in parsed.items()},
    )


def result_request(
    execution_id: str, timeout: float | None
) -> tuple[execution_service_pb2.ResultRequest, float | None]:
    """The request and the call deadline for a Result wait (`waits.wait_seconds`:
    no limit for None or a wait longer than anyone means)."""
    request = execution_service_pb2.ResultRequest(execution_id=execution_id)
    seconds = wait_seconds(timeout)
    if seconds is None:
        return request, None
    request.timeout.CopyFrom(convert.duration(seconds))
    return request, seconds + RESULT_DEADLINE_MARGIN


def _responses(
    responses: Mapping[str, ElicitationResponse | Mapping[str, Any]],
) -> dict[str, ElicitationResponse]:
    if not isinstance(responses, Mapping):
        raise ManagedInputValidationError(
            "responses must be a mapping of request key to ElicitationResponse",
            field_violations=[FieldViolation("responses", "must be a mapping")],
        )
    parsed: dict[str, ElicitationResponse] = {}
    violations: list[FieldViolation] = []
    for key, value in responses.items():
        if not isinstance(key, str) or not key:
            violations.append(FieldViolation("responses", "every key must be a non-empty string"))
            continue
        try:
            parsed[key] = _RESPONSE.validate_python(value)
        except ValidationError as exc:
            violations.extend(
                FieldViolation(f"responses{fieldpath.key(key)}{_loc(e['loc'])}", e["msg"])
                for e in exc.errors()
            )
    if violations:
        raise ManagedInputValidationError("malformed response map", field_violations=violations)
    return parsed


def _loc(loc: Sequence[int | str]) -> str:
    """A pydantic error location inside a value, in `fieldpath`'s spelling."""
    return "".join(f"[{p}]" if isinstance(p, int) else fieldpath.member(str(p)) for p in loc)


def _validated(adapter: TypeAdapter[Any], value: Any, field: str) -> Any:
    try:
        return adapter.validate_python(value)
    except ValidationError as exc:
        violations = [
            FieldViolation(
                "".join(
                    f"[{p}]" if isinstance(p, int) else f".{p}" for p in (field, *e["loc"])
                ).lstrip("."),
                e["msg"],
            )
            for e in exc.errors()
        ]
        raise ModelValidationError(f"invalid {field}", field_violations=violations) from None
