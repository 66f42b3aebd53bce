"""Execution specs on the wire: SubmitRequest <-> the model's spec documents.

A client names a server binding; the service swaps in the binding it
configures (`m3grpc.api.execution_service`), so a client can never make the
service run a command of its choosing. Field paths of violations are paths into the request
(`agent.tools[1]`), as error_reason.proto promises; `guard` maps those the
model layer raises (see request_paths).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from m3grpc.errors import FieldViolation, ModelValidationError
from m3grpc.specs import AgentSpec, ElicitationPlan, OperationSpec, PlanRule, ScriptStep
from m3grpc.types import HumanInput
from m3grpc.wire import convert
from m3grpc.wire.gen.m3.v1 import execution_pb2, execution_service_pb2

_ANSWERS = {"decline": "decline", "cancel": "cancel"}

# -- server side: request -> spec document ---------------------------------------------


def submission(
    request: execution_service_pb2.SubmitRequest,
) -> tuple[dict[str, Any], HumanInput]:
    """The spec document and human_input of a SubmitRequest; the document's
    `server` is the binding name the client gave (the service resolves it)."""
    violations: list[FieldViolation] = []
    human_input = convert.HUMAN_INPUT.model(request.human_input)
    if request.human_input == execution_pb2.HUMAN_INPUT_UNSPECIFIED:
        human_input = "fail"  # documented default
    elif human_input is None:
        violations.append(FieldViolation("human_input", convert.unknown_enum(request.human_input)))
    which = request.WhichOneof("spec")
    document: dict[str, Any] = {}
    if which == "agent":
        document = _agent(request.agent, violations)
    elif which == "operation":
        document = _operation(request.operation, violations)
    else:
        violations.append(FieldViolation("spec", "set agent or operation"))
    if violations:
        raise ModelValidationError("invalid submission", field_violations=violations)
    return document, cast(HumanInput, human_input)


def _agent(agent: execution_pb2.AgentSpec, violations: list[FieldViolation]) -> dict[str, Any]:
    if not agent.harness:
        violations.append(FieldViolation("agent.harness", "required"))
    if not agent.server:
        violations.append(FieldViolation("agent.server", "required"))
    document: dict[str, Any] = {
        "kind": "agent",
        "prompt": agent.prompt,
        "harness": agent.harness,
        "models": list(agent.models),
        "server": agent.server,
        "tools": list(agent.tools),
        # No script: the scripted harness calls the selected tools.
        "script": [
            _step(step, f"agent.script[{index}]", violations)
            for index, step in enumerate(agent.script)
        ]
        or None,
        "permission_policy": {"default": _permission_policy(agent.permission_policy, violations)},
    }
    if agent.HasField("elicitation_plan"):
        document["elicitation_plan"] = _plan(
            agent.elicitation_plan, "agent.elicitation_plan", violations
        )
    if agent.round_limit:
        document["round_limit"] = agent.round_limit
    if agent.HasField("round_timeout"):
        try:
            document["round_timeout_seconds"] = convert.from_duration(agent.round_timeout)
        except convert.WireValueError as exc:
            violations.append(FieldViolation("agent.round_timeout", exc.description))
    return document


def _permission_policy(number: int, violations: list[FieldViolation]) -> str:
    if number == execution_pb2.PERMISSION_POLICY_UNSPECIFIED:
        return "deny"  # documented default
    policy = convert.PERMISSION_POLICY.model(number)
    if policy is None:
        violations.append(FieldViolation("agent.permission_policy", convert.unknown_enum(number)))
        return "deny"
    return policy


def struct_field(
    holder: Any, name: str, path: str, violations: list[FieldViolation]
) -> dict[str, Any] | None:
    """A Struct field as JSON (None when unset); a value JSON cannot hold is a violation."""
    try:
        return convert.optional_struct(holder, name)
    except convert.WireValueError as exc:
        violations.append(FieldViolation(path + exc.path, exc.description))
        return None


def _operation(
    operation: execution_pb2.OperationSpec, violations: list[FieldViolation]
) -> dict[str, Any]:
    if not operation.server:
        violations.append(FieldViolation("operation.server", "required"))
    if not operation.HasField("operation"):
        violations.append(FieldViolation("operation.operation", "required"))
    document: dict[str, Any] = {
        "kind": "operation",
        "server": operation.server,
        "operation": _step(operation.operation, "operation.operation", violations),
    }
    if operation.HasField("elicitation_plan"):
        document["elicitation_plan"] = _plan(
            operation.elicitation_plan, "operation.elicitation_plan", violations
        )
    if operation.round_limit:
        document["round_limit"] = operation.round_limit
    return document


def _step(
    step: execution_pb2.OperationStep, path: str, violations: list[FieldViolation]
) -> dict[str, Any]:
    kind = convert.OPERATION_KIND.model(step.kind)
    if step.kind == execution_pb2.OPERATION_KIND_UNSPECIFIED:
        violations.append(FieldViolation(f"{path}.kind", "required"))
    elif kind is None:
        violations.append(FieldViolation(f"{path}.kind", convert.unknown_enum(step.kind)))
    if not step.name:
        violations.append(FieldViolation(f"{path}.name", "required"))
    if kind == "resource" and step.HasField("arguments"):
        violations.append(FieldViolation(f"{path}.arguments", "must be unset for a resource"))
    document: dict[str, Any] = {
        "kind": kind or "tool",
        "name": step.name,
        "arguments": struct_field(step, "arguments", f"{path}.arguments", violations) or {},
    }
    if kind not in (None, "tool") and step.task:
        violations.append(FieldViolation(f"{path}.task", "only a tool call can run as a task"))
    if step.task:
        document["task"] = True
    if step.HasField("task_ttl"):
        try:
            document["task_ttl_seconds"] = convert.from_duration(step.task_ttl)
        except convert.WireValueError as exc:
            violations.append(FieldViolation(f"{path}.task_ttl", exc.description))
    return document


def _plan(
    plan: execution_pb2.ElicitationPlan, path: str, violations: list[FieldViolation]
) -> dict[str, Any]:
    rules = []
    for index, rule in enumerate(plan.rules):
        document: dict[str, Any] = {
            name: getattr(rule, name)
            for name in ("operation_name", "request_key", "message_contains")
            if rule.HasField(name)
        }
        answer = rule.WhichOneof("answer")
        if answer == "accept_content":
            content = struct_field(
                rule, "accept_content", f"{path}.rules[{index}].accept_content", violations
            )
            document.update(action="accept", content=content or {})
        elif answer == "accept_defaults":
            document.update(action="accept", use_schema_defaults=True)
        elif answer in _ANSWERS:
            document["action"] = _ANSWERS[answer]
        else:
            violations.append(FieldViolation(f"{path}.rules[{index}].answer", "required"))
        rules.append(document)
    return {"rules": rules}


# -- client side: model -> request ------------------------------------------------------


def step_message(step: ScriptStep) -> execution_pb2.OperationStep:
    message = execution_pb2.OperationStep(
        kind=convert.OPERATION_KIND.wire(step.kind), name=step.name
    )
    if step.arguments:
        message.arguments.CopyFrom(convert.dict_to_struct(step.arguments))
    message.task = step.task
    if step.task_ttl_seconds is not None:
        message.task_ttl.CopyFrom(convert.duration(step.task_ttl_seconds))
    return message


def plan_message(plan: ElicitationPlan) -> execution_pb2.ElicitationPlan:
    return execution_pb2.ElicitationPlan(rules=[_rule_message(rule) for rule in plan.rules])


def _rule_message(rule: PlanRule) -> execution_pb2.ElicitationRule:
    message = execution_pb2.ElicitationRule()
    for name in ("operation_name", "request_key", "message_contains"):
        value = getattr(rule, name)
        if value is not None:
            setattr(message, name, value)
    if rule.action == "decline":
        message.decline.SetInParent()
    elif rule.action == "cancel":
        message.cancel.SetInParent()
    elif rule.use_schema_defaults:
        message.accept_defaults.SetInParent()
    else:
        # An accept without content answers a form with {} and a URL with consent,
        # the same as an accept_content of {}.
        message.accept_content.CopyFrom(convert.dict_to_struct(rule.content or {}))
    return message


def agent_message(
    *,
    prompt: str,
    server: str,
    harness: str = "scripted",
    models: Sequence[str] = (),
    tools: Sequence[str] = (),
    script: Sequence[ScriptStep] | None = None,
    elicitation_plan: ElicitationPlan | None = None,
    permission_policy: str = "deny",
    round_limit: int | None = None,
    round_timeout_seconds: float | None = None,
) -> execution_pb2.AgentSpec:
    message = execution_pb2.AgentSpec(
        harness=harness,
        models=list(models),
        prompt=prompt,
        server=server,
        tools=list(tools),
        script=[step_message(step) for step in script or ()],
        permission_policy=convert.PERMISSION_POLICY.wire(permission_policy),
        round_limit=round_limit or 0,
    )
    if elicitation_plan is not None:
        message.elicitation_plan.CopyFrom(plan_message(elicitation_plan))
    if round_timeout_seconds is not None:
        message.round_timeout.CopyFrom(convert.duration(round_timeout_seconds))
    return message


def spec_request(spec: AgentSpec | OperationSpec) -> execution_service_pb2.SubmitRequest:
    """A SubmitRequest for a spec model; only the binding's name goes on the wire."""
    if isinstance(spec, AgentSpec):
        return execution_service_pb2.SubmitRequest(
            agent=agent_message(
                prompt=spec.prompt,
                server=spec.server.name,
                harness=spec.harness,
                models=spec.models,
                tools=spec.tools,
                script=spec.script,
                elicitation_plan=spec.elicitation_plan,
                permission_policy=spec.permission_policy.default,
                round_limit=spec.round_limit,
                round_timeout_seconds=spec.round_timeout_seconds,
            )
        )
    operation = execution_pb2.OperationSpec(
        server=spec.server.name,
        operation=step_message(spec.operation),
        round_limit=spec.round_limit,
    )
    if spec.elicitation_plan is not None:
        operation.elicitation_plan.CopyFrom(plan_message(spec.elicitation_plan))
    return execution_service_pb2.SubmitRequest(operation=operation)
