"""Answering elicitations from an ElicitationPlan (human_input="fail")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from m3grpc.errors import ElicitationNotAnsweredError
from m3grpc.specs import ElicitationPlan, PlanRule
from m3grpc.types import (
    ElicitationRequest,
    ElicitationResponse,
    FormElicitationRequest,
)


def answer_from_plan(
    plan: ElicitationPlan | None,
    operation_name: str,
    requests: Mapping[str, ElicitationRequest],
) -> dict[str, ElicitationResponse]:
    """One response per request, or ElicitationNotAnsweredError naming the first gap."""
    answers: dict[str, ElicitationResponse] = {}
    for key, request in requests.items():
        rule = _first_match(plan, operation_name, key, request)
        if rule is None:
            raise ElicitationNotAnsweredError(
                f"no elicitation plan rule answers request {key!r} of {operation_name!r}",
                metadata={"request_key": key, "operation_name": operation_name},
            )
        answers[key] = _response(rule, request)
    return answers


def _first_match(
    plan: ElicitationPlan | None, operation_name: str, key: str, request: ElicitationRequest
) -> PlanRule | None:
    if plan is None:
        return None
    for rule in plan.rules:
        if rule.operation_name is not None and rule.operation_name != operation_name:
            continue
        if rule.request_key is not None and rule.request_key != key:
            continue
        if rule.message_contains is not None and rule.message_contains not in request.message:
            continue
        return rule
    return None


def _response(rule: PlanRule, request: ElicitationRequest) -> ElicitationResponse:
    if rule.action != "accept" or not isinstance(request, FormElicitationRequest):
        return ElicitationResponse(action=rule.action)
    if rule.use_schema_defaults:
        return ElicitationResponse(action="accept", content=schema_defaults(request))
    return ElicitationResponse(action="accept", content=dict(rule.content or {}))


def schema_defaults(request: FormElicitationRequest) -> dict[str, Any]:
    """The `default` of every top-level property of the requested schema that has one."""
    properties = request.requested_schema.get("properties") or {}
    return {
        name: prop["default"]
        for name, prop in properties.items()
        if isinstance(prop, Mapping) and "default" in prop
    }
