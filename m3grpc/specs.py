"""What a caller submits: an AgentSpec (a harness works against a server) or a
single OperationSpec, with an optional elicitation plan for human_input="fail".

Specs are pydantic models so they are validated once at submission and stored
as JSON with the execution.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from m3grpc.errors import FieldViolation, ModelValidationError
from m3grpc.servers import TaggedServerBinding
from m3grpc.types import ElicitationAction, OperationKind


class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ScriptStep(_Spec):
    """One MCP operation: call a tool, get a prompt or read a resource."""

    kind: OperationKind = "tool"
    name: str = Field(min_length=1)
    arguments: Mapping[str, Any] = Field(default_factory=dict)
    # Run a tool call as an MCP task (2025-11-25): tools/call with `task`, then
    # tasks/get polling and tasks/result. A tool whose `execution.taskSupport` is
    # "required" runs as a task without it.
    task: bool = False
    # The task's requested time to live; None lets the server choose.
    task_ttl_seconds: float | None = Field(default=None, gt=0, le=315_360_000)

    @model_validator(mode="after")
    def _task_only_for_tools(self) -> ScriptStep:
        if self.kind != "tool" and (self.task or self.task_ttl_seconds is not None):
            raise ValueError("only a tool call can run as an MCP task")
        return self


class PlanRule(_Spec):
    """Answers every elicitation request it matches (all given matchers must match).

    `use_schema_defaults` accepts with the `default` of each schema property.
    """

    operation_name: str | None = None
    request_key: str | None = None
    message_contains: str | None = None
    action: ElicitationAction
    content: Mapping[str, Any] | None = None
    use_schema_defaults: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> PlanRule:
        if self.action != "accept" and (self.content is not None or self.use_schema_defaults):
            raise ValueError(f"a {self.action} rule carries no content")
        if self.content is not None and self.use_schema_defaults:
            raise ValueError("give content or use_schema_defaults, not both")
        return self


class ElicitationPlan(_Spec):
    """Predefined answers for human_input="fail": the first matching rule answers."""

    rules: tuple[PlanRule, ...] = Field(min_length=1)


class PermissionPolicy(_Spec):
    """Native permission prompts outside the tool selection (harnesses that have them).

    The scripted harness has none: it refuses every unselected tool itself.
    """

    default: Literal["deny", "allow"] = "deny"


class AgentSpec(_Spec):
    """An agent (harness + models) working on a prompt against one MCP server."""

    kind: Literal["agent"] = "agent"
    prompt: str
    harness: str = "scripted"
    models: tuple[str, ...] = ()
    server: TaggedServerBinding
    tools: tuple[str, ...] = ()
    script: tuple[ScriptStep, ...] | None = None
    elicitation_plan: ElicitationPlan | None = None
    permission_policy: PermissionPolicy = Field(default_factory=PermissionPolicy)
    round_limit: int = Field(default=8, ge=1, le=1000)
    # How long a managed round may wait for its response; None waits indefinitely.
    # At most ten years: a deadline must stay a representable datetime (a larger
    # value would overflow when the round is created and leave the run stuck).
    round_timeout_seconds: float | None = Field(default=None, gt=0, le=315_360_000)


class OperationSpec(_Spec):
    """One MCP operation run directly, without an agent."""

    kind: Literal["operation"] = "operation"
    server: TaggedServerBinding
    operation: ScriptStep
    elicitation_plan: ElicitationPlan | None = None
    round_limit: int = Field(default=8, ge=1, le=1000)


ExecutionSpec = Annotated[AgentSpec | OperationSpec, Field(discriminator="kind")]


def agent_config(config: Mapping[str, Any], index: int) -> tuple[str, tuple[str, ...]]:
    """(harness, models) of one of `kit.agents([...])`'s configurations, checked the
    same way by the embedded kit and the remote client."""
    harness = config.get("harness") if isinstance(config, Mapping) else None
    models = config.get("models", []) if isinstance(config, Mapping) else None
    violations = []
    if not isinstance(harness, str) or not harness:
        violations.append(FieldViolation(f"agents[{index}].harness", "must be a harness name"))
    if not isinstance(models, Sequence) or isinstance(models, str):
        violations.append(FieldViolation(f"agents[{index}].models", "must be a list of models"))
    if violations:
        raise ModelValidationError("invalid agent configuration", field_violations=violations)
    assert isinstance(harness, str) and isinstance(models, Sequence)
    return harness, tuple(str(m) for m in models)
