"""One submit API for the four agent faces, and one respond outcome for every handle.

`Agent`, `AsyncAgent` (m3grpc.kit), `RemoteAgent` and `AsyncRemoteAgent`
(m3grpc.client) all take

    agent.submit(prompt, *, server, tools=(), script=None, elicitation_plan=None,
                 permission_policy=None, human_input="fail", round_limit=8,
                 round_timeout_seconds=None, request_id=None)

and turn everything after `prompt` and `server` into one `SubmitOptions`: the
embedded kit builds the spec document from it, the remote client the wire
request. `tests/test_faces.py` pins that the four signatures stay the same.

Every handle's `respond_elicitation(round_id, responses, *, idempotency_key)`
returns a `RespondOutcome` (callers that follow the product documentation, which
returns None, can ignore it).

This module imports only the light model modules (pydantic), so the remote
client can use it without the server's dependencies.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from m3grpc.specs import ElicitationPlan, PermissionPolicy, ScriptStep
from m3grpc.types import HumanInput, ManagedInputStatus


@dataclass(frozen=True, kw_only=True)
class SubmitOptions:
    """What an agent face's `submit` takes besides the prompt and the server.

    The values are passed on unchecked: the embedded runtime and the remote
    client each validate them with their own typed errors."""

    tools: Sequence[str] = ()
    script: Sequence[ScriptStep | Mapping[str, Any]] | None = None
    elicitation_plan: ElicitationPlan | Mapping[str, Any] | None = None
    permission_policy: PermissionPolicy | Mapping[str, Any] | None = None
    human_input: HumanInput = "fail"
    round_limit: int = 8
    round_timeout_seconds: float | None = None
    # AIP-155: the same request ID returns the same execution.
    request_id: str | None = None

    @classmethod
    def of(cls, arguments: Mapping[str, Any]) -> SubmitOptions:
        """The options among a face's `submit` arguments (its `locals()`): the faces'
        keyword parameters are this model's fields (tests/test_faces.py)."""
        return cls(**{option.name: arguments[option.name] for option in fields(cls)})

    def agent_document(
        self, *, harness: str, models: Sequence[str], prompt: str, server: object
    ) -> dict[str, Any]:
        """The AgentSpec as a JSON-like mapping (`server` as given: a binding or its
        mapping). A mapping, not the model, so that every invalid value surfaces as
        one ModelValidationError from the runtime's submission checks."""
        dump = getattr(server, "model_dump", None)
        spec: dict[str, Any] = {
            "kind": "agent",
            "prompt": prompt,
            "harness": harness,
            "models": list(models),
            "server": dump() if dump is not None else server,
            "tools": list(self.tools),
            "round_limit": self.round_limit,
            "round_timeout_seconds": self.round_timeout_seconds,
        }
        if self.script is not None:
            spec["script"] = [_document(step) for step in self.script]
        if self.elicitation_plan is not None:
            spec["elicitation_plan"] = _document(self.elicitation_plan)
        if self.permission_policy is not None:
            spec["permission_policy"] = _document(self.permission_policy)
        return spec


def _document(value: object) -> object:
    return (
        value.model_dump()
        if isinstance(value, ScriptStep | ElicitationPlan | PermissionPolicy)
        else value
    )


@dataclass(frozen=True)
class RespondOutcome:
    """What a response did: the round's status after the call, and replay or not.

    `status` is None only when a remote service answered with a status this
    client does not know."""

    round_id: str
    status: ManagedInputStatus | None
    replayed: bool
