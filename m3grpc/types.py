"""Public domain model of managed elicitation input (the seed's types).

These pydantic models are the contract shared by the embedded Python API, the
store, the runtime and the gRPC mapping. They carry no storage or transport
details; lease tokens live only on `ManagedInputRecord`, never on the round a
caller sees.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

HumanInput = Literal["fail", "managed"]
OperationKind = Literal["tool", "prompt", "resource"]
ElicitationAction = Literal["accept", "decline", "cancel"]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ElicitationResponse(_Model):
    """One answer to one elicitation request (MCP `ElicitResult`)."""

    action: ElicitationAction
    content: Mapping[str, Any] | None = None


class _RequestContext(_Model):
    meta: Mapping[str, Any] | None = None
    task: Mapping[str, Any] | None = None
    server: str | None = None
    operation_kind: OperationKind | None = None
    operation_name: str | None = None


class FormElicitationRequest(_RequestContext):
    """Form mode: the server wants structured content matching `requested_schema`."""

    mode: Literal["form"] = "form"
    message: str
    requested_schema: Mapping[str, Any]


class UrlElicitationRequest(_RequestContext):
    """URL mode: the user is sent to `url`; M3 only records consent, never browses."""

    mode: Literal["url"] = "url"
    message: str
    url: str
    elicitation_id: str


ElicitationRequest = Annotated[
    FormElicitationRequest | UrlElicitationRequest, Field(discriminator="mode")
]


class PendingElicitationRound(_Model):
    """A durable round of input requests that waits for a caller's responses."""

    round_id: str = Field(min_length=1)
    execution_id: str = Field(min_length=1)
    logical_operation_id: str = Field(min_length=1)
    server: str
    operation_kind: OperationKind
    operation_name: str
    requests: Mapping[str, ElicitationRequest]
    created_at: AwareDatetime
    request_state: str | None = None
    deadline: AwareDatetime | None = None

    @field_validator("requests")
    @classmethod
    def _requests_not_empty(
        cls, value: Mapping[str, ElicitationRequest]
    ) -> Mapping[str, ElicitationRequest]:
        if not value:
            raise ValueError("a round needs at least one request")
        if any(not key for key in value):
            raise ValueError("request keys must be non-empty")
        return value


class ExecutionStatus(enum.StrEnum):
    """Lifecycle of an execution."""

    QUEUED = "queued"
    RUNNING = "running"
    WAITING_FOR_INPUT = "waiting_for_input"
    FINISHED = "finished"


class ExecutionOutcome(enum.StrEnum):
    """How a finished execution ended.

    SUCCEEDED: every operation completed; no failure code. CANCELLED: `cancel()`
    was called, and only then; failure code `cancelled`. FAILED: anything else
    ended it (an operation, the harness, recovery, the service shutting down:
    `worker_shutdown`); the failure code says what. `failure_code` and
    `failure_message` are set for every outcome other than SUCCEEDED.
    """

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class OperationResult(_Model):
    """What one MCP operation of an execution returned."""

    logical_operation_id: str
    server: str
    operation_kind: OperationKind
    operation_name: str
    ok: bool
    result: Mapping[str, Any] | None = None
    failure_code: str | None = None
    failure_message: str | None = None


class ExecutionState(_Model):
    """A snapshot of an execution: its lifecycle and, once finished, its outcome."""

    execution_id: str
    lifecycle: ExecutionStatus
    outcome: ExecutionOutcome | None = None
    human_input: HumanInput = "fail"
    created_at: AwareDatetime
    updated_at: AwareDatetime
    finished_at: AwareDatetime | None = None
    failure_code: str | None = None
    failure_message: str | None = None


class NativePrompt(_Model):
    """A native permission prompt an agent raised, and how M3 answered it."""

    # "command_execution", "file_change", "permissions", "user_input", or
    # "mcp_tool_call" (a tool call when the spec selects no tools).
    kind: str
    decision: Literal["allow", "deny"]
    detail: str | None = None  # e.g. the command


class AgentReport(_Model):
    """What an agent harness (e.g. Codex) reports about its run."""

    harness: str
    model: str | None = None
    session_id: str | None = None  # Codex: the thread id
    turn_id: str | None = None
    turn_status: str | None = None  # Codex: completed / interrupted / failed
    final_message: str | None = None
    # Token counts as the agent reports them (Codex: input_tokens, output_tokens, ...).
    token_usage: Mapping[str, int] | None = None
    native_prompts: tuple[NativePrompt, ...] = ()


class ExecutionResult(_Model):
    """The terminal result of an execution."""

    execution_id: str
    outcome: ExecutionOutcome
    operations: tuple[OperationResult, ...] = ()
    failure_code: str | None = None
    failure_message: str | None = None
    finished_at: AwareDatetime
    # Set by agent harnesses (None for the scripted harness).
    agent: AgentReport | None = None


class ManagedInputLease(_Model):
    """The compare-and-set worker lease (the documented name of the one worker lease).

    A worker claims an execution under it and holds every round of that
    execution under the same owner and token, so one heartbeat renews them all;
    there is no separate execution lease.
    """

    owner_id: str = Field(min_length=1)
    lease_token: str = Field(min_length=1)
    expires_at: AwareDatetime


class ManagedInputStatus(enum.StrEnum):
    PENDING = "pending"
    RESPONSE_VALIDATED = "response_validated"
    DELIVERY_STARTED = "delivery_started"
    DELIVERED = "delivered"
    RESOLVED = "resolved"
    FAILED = "failed"

    @property
    def terminal(self) -> bool:
        return self in (ManagedInputStatus.RESOLVED, ManagedInputStatus.FAILED)


class ManagedInputRecord(_Model):
    """The store's full record of a round, including worker coordination state."""

    # The round as it was asked. `pending` is the documented name; it stays set
    # whatever `status` says (a resolved or failed round keeps its requests).
    pending: PendingElicitationRound
    round_index: int = Field(ge=0)
    round_limit: int = Field(ge=1)
    status: ManagedInputStatus
    lease: ManagedInputLease | None
    responses: Mapping[str, ElicitationResponse] | None = None
    idempotency_key: str | None = None
    harness_session_id: str | None = None
    harness_resume_token: str | None = None
    turn_metadata: Mapping[str, Any] | None = None
    operation_parameters: Mapping[str, Any] = Field(default_factory=dict)
    delivery_attempts: int = Field(default=0, ge=0)
    created_at: AwareDatetime
    updated_at: AwareDatetime
    response_validated_at: AwareDatetime | None = None
    delivery_started_at: AwareDatetime | None = None
    delivered_at: AwareDatetime | None = None
    resolved_at: AwareDatetime | None = None
    failed_at: AwareDatetime | None = None
    failure_code: str | None = None
    failure_message: str | None = None

    @property
    def round_id(self) -> str:
        return self.pending.round_id


class RedactedResponses(_Model):
    """Diagnostic projection of a round's responses: never the content values."""

    round_id: str
    status: ManagedInputStatus
    idempotency_key: str | None
    actions: Mapping[str, ElicitationAction]
    content_keys: Mapping[str, tuple[str, ...]]
    digest: str | None


class RoundView(_Model):
    """The operator's view of one round (GetRound, ListRounds; the remote kits'
    `get_round` / `list_rounds`): what was asked, where it stands, when it moved,
    and its answer redacted (`responses`: actions and content keys, never content
    values). No lease, no request_state."""

    round_id: str
    execution_id: str
    logical_operation_id: str
    server: str
    operation_kind: OperationKind | None
    operation_name: str
    round_index: int
    round_limit: int
    status: ManagedInputStatus
    requests: Mapping[str, ElicitationRequest]
    responses: RedactedResponses | None = None
    delivery_attempts: int = 0
    created_at: AwareDatetime
    updated_at: AwareDatetime
    deadline: AwareDatetime | None = None
    response_validated_at: AwareDatetime | None = None
    delivery_started_at: AwareDatetime | None = None
    delivered_at: AwareDatetime | None = None
    resolved_at: AwareDatetime | None = None
    failed_at: AwareDatetime | None = None
    failure_code: str | None = None
    failure_message: str | None = None


class RoundPage(_Model):
    """One page of ListRounds, oldest round first; `next_page_token` continues it
    (None on the last page)."""

    rounds: tuple[RoundView, ...]
    next_page_token: str | None = None
