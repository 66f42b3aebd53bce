"""The harness contract: what the runtime hands a harness and what it gets back.

A harness runs one execution's MCP operations against one server. It knows
nothing about storage, gRPC or the runtime: whenever the MCP server asks for
user input, the harness builds an `InputRound` and awaits the injected
`InputResolver`, then delivers what it returns to the server.

Operation identity: `OperationRef.logical_operation_id` is `f"op-{index}"`,
where `index` is the 0-based position of the operation in the execution's plan
(the script, or the selected tools in selection order when there is no
script). Running the same task again yields the same ids.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from m3grpc.servers import ServerBinding
from m3grpc.types import (
    AgentReport,
    ElicitationResponse,
    FormElicitationRequest,
    OperationKind,
    OperationResult,
    UrlElicitationRequest,
)

InputProtocol = Literal["legacy", "mrtr"]

# Failure codes a harness records on `OperationResult.failure_code`. An
# `M3Error` raised by the resolver is recorded as `error.reason.lower()`.
TOOL_ERROR = "tool_error"
TOOL_NOT_SELECTED = "tool_not_selected"
# An agent's call that the execution's permission policy refused (no tool selection).
PERMISSION_DENIED = "permission_denied"
TOOL_NOT_FOUND = "tool_not_found"
ROUND_LIMIT_EXCEEDED = "round_limit_exceeded"
INVALID_INPUT_RESPONSE = "invalid_input_response"
# The server asked with a form schema MCP does not allow (see m3grpc.form_schema):
# no answer to it could be delivered, so it is refused before it becomes a round.
INVALID_ELICITATION_SCHEMA = "invalid_elicitation_schema"
UNSUPPORTED_INPUT_REQUEST = "unsupported_input_request"
MCP_ERROR = "mcp_error"
# The server refused an MRTR retry's request_state: the MCP Python SDK seals it
# with a 10-minute TTL by default, so a round answered later than that fails so.
REQUEST_STATE_REJECTED = "request_state_rejected"
INVALID_SERVER_RESULT = "invalid_server_result"
SERVER_UNAVAILABLE = "server_unavailable"
CONNECTION_CLOSED = "connection_closed"
# The server answered a call with a URL-elicitation-required error (-32042) and
# the user declined / cancelled one of the listed URL elicitations: the call is
# not retried.
URL_ELICITATION_DECLINED = "url_elicitation_declined"
URL_ELICITATION_CANCELLED = "url_elicitation_cancelled"
# The binding is pinned to protocol 2026-07-28 and the server speaks only an older one.
PROTOCOL_MISMATCH = "protocol_mismatch"
# A step asked for a task-augmented call of a tool whose task support is forbidden.
TASK_NOT_SUPPORTED = "task_not_supported"
# The server's task ended `cancelled` (not by M3) or `failed` without a result.
TASK_CANCELLED = "task_cancelled"
TASK_FAILED = "task_failed"
# A released execution's stored round does not match the operation the plan puts
# there, or its resume token is unreadable: it cannot be resumed (fails closed).
RESUME_UNAVAILABLE = "resume_unavailable"


def operation_id(index: int) -> str:
    """The logical operation id of the `index`-th (0-based) planned operation."""
    return f"op-{index}"


def operation_index(logical_operation_id: str) -> int | None:
    """The planned position `operation_id` encoded, or None for another id."""
    prefix, _, index = logical_operation_id.partition("-")
    if prefix != "op" or not index.isdigit():
        return None
    return int(index)


@dataclass(frozen=True)
class OperationStep:
    """One scripted MCP operation: a tool call, a prompt get or a resource read."""

    kind: OperationKind
    name: str  # tool name, prompt name, or resource URI
    arguments: Mapping[str, Any] = field(default_factory=dict)
    # Run the tool call as an MCP task (2025-11-25); task-required tools always do.
    task: bool = False
    task_ttl_seconds: float | None = None


@dataclass(frozen=True)
class OperationRef:
    """Identity of one running MCP operation."""

    logical_operation_id: str
    server: str
    operation_kind: OperationKind
    operation_name: str
    arguments: Mapping[str, Any]

    def result(
        self,
        *,
        ok: bool,
        result: Mapping[str, Any] | None = None,
        failure_code: str | None = None,
        failure_message: str | None = None,
    ) -> OperationResult:
        """What this operation returned, under its identity."""
        return OperationResult(
            logical_operation_id=self.logical_operation_id,
            server=self.server,
            operation_kind=self.operation_kind,
            operation_name=self.operation_name,
            ok=ok,
            result=result,
            failure_code=failure_code,
            failure_message=failure_message,
        )

    def failed(
        self, code: str, message: str, *, result: Mapping[str, Any] | None = None
    ) -> OperationResult:
        return self.result(ok=False, result=result, failure_code=code, failure_message=message)


@dataclass(frozen=True)
class InputRound:
    """One round of input requests the harness hands the resolver.

    `requests` is keyed by request key (see `m3grpc.harness.request_keys`);
    each request carries `server`, `operation_kind` and `operation_name`.
    `request_state` is the server's opaque MRTR state (None for legacy).
    """

    operation: OperationRef
    round_index: int  # 0-based, per operation
    requests: Mapping[str, FormElicitationRequest | UrlElicitationRequest]
    request_state: str | None
    protocol: InputProtocol
    # Where an agent harness (e.g. Codex) was when the request arrived: its
    # session/thread id and turn metadata, kept on the stored round. Not a
    # resume token: a native agent process cannot be resumed by another worker.
    harness_session_id: str | None = None
    turn_metadata: Mapping[str, Any] | None = None
    # Set only on a round another worker may resume (a 2026-07-28 round of a
    # binding pinned to that protocol: the server holds nothing open): what the
    # harness needs, besides `requests` and `request_state`, to send the retry
    # from a fresh process. Opaque to everyone but the harness; stored with the round.
    resume_token: str | None = None
    # The harness sends the answers on as soon as the resolver returns them, after
    # checking only that they fit the requests (a legacy `elicitation/create`
    # reply, which nothing acknowledges): the resolver may record them delivered
    # with the start of their delivery, in one write, and `input_delivered` follows.
    sent_on_return: bool = False


@dataclass(frozen=True)
class ResumePoint:
    """Where a released execution resumes (see `InputRound.resume_token`).

    `completed` are the results of the operations that finished before (they
    are not run again); `operation_index` is the operation the round belongs to
    (its planned position); `round` is the stored round, whose answers the
    resolver hands out again, and the harness then sends the retry.
    """

    operation_index: int
    completed: Sequence[OperationResult]
    round: InputRound


class InputResolver(Protocol):
    """Answers a round: one `ElicitationResponse` per request key, exactly those keys.

    It may take as long as a human needs; the harness imposes no timeout. It
    may raise an `M3Error` (e.g. `OperationTimeout`) to fail the operation.

    A harness never hands a resolver a form request whose schema MCP does not
    allow (`m3grpc.form_schema`); it fails the operation with
    `invalid_elicitation_schema` instead.

    A resolver may also define these hooks (the harness calls those it has):

    - `async operation_started(operation: OperationRef)` when the operation's
      request is about to be sent (an execution stopped while it runs lists it).

    - `async operation_finished(result: OperationResult, *, last: bool = False)`
      after each operation ends, before the connection closes: the answers
      handed out for it reached the server if it completed. `last` says the
      harness runs no further operation in this execution.
    - `async connection_closing()` when the harness is about to close a
      connection of the execution's own after its operations (not a shared
      one): closing may take a while, so what the resolver holds back for the
      execution's finish is stored now.
    - `async input_requested(operation: OperationRef)` when the server asks the
      operation for input again (whether or not the harness passes the request
      on): the answers handed out for it before reached the server.
    - `async input_delivered(operation: OperationRef)` when the operation's
      latest answers reached the server: a legacy answer is handed to the MCP
      session to send (legacy elicitation has no receipt; nothing later
      confirms it), or the server replied to the retry that carried them.
    """

    async def __call__(self, round: InputRound) -> Mapping[str, ElicitationResponse]: ...


@dataclass(frozen=True)
class HarnessTask:
    """One execution's work for a harness.

    `prompt` is the agent's instruction; the scripted harness ignores it.
    `tools` is the tool selection as "server:tool" entries. A harness may call
    only selected tools of `server`; an empty selection allows no tool at all
    (the runtime always passes the execution's selection). Prompts and
    resources are not subject to the selection.

    `script` None means: call each selected tool of `server` once, in selection
    order, with arguments built from the defaults in its input schema.
    """

    execution_id: str
    prompt: str
    server: ServerBinding
    tools: Sequence[str]
    script: Sequence[OperationStep] | None = None
    round_limit: int = 8  # max input rounds per operation
    # For agent harnesses: the models to use (the first one runs) and how to
    # answer the agent's native permission prompts outside the tool selection.
    models: Sequence[str] = ()
    permission_policy: Literal["deny", "allow"] = "deny"
    # A released execution resumed by another worker (only harnesses whose
    # rounds carry a resume token are handed one).
    resume: ResumePoint | None = None

    def __post_init__(self) -> None:
        if self.round_limit < 1:
            raise ValueError("round_limit must be at least 1")
        for entry in self.tools:
            server, sep, tool = entry.partition(":")
            if not (server and sep and tool):
                raise ValueError(f"tool selection entries look like 'server:tool', got {entry!r}")

    def selected_tools(self) -> list[str]:
        """Names of the selected tools of `server`, in selection order, without duplicates."""
        # A dict keeps insertion order and de-duplicates in linear time.
        names: dict[str, None] = {}
        for entry in self.tools:
            server, _, tool = entry.partition(":")
            if server == self.server.name:
                names.setdefault(tool)
        return list(names)


@dataclass(frozen=True)
class HarnessOutcome:
    """What an agent harness returns: the operations, plus the agent's own report.

    `failure` (code, message) fails the execution when no operation failed
    (e.g. the agent's turn failed).
    """

    operations: list[OperationResult]
    agent: AgentReport | None = None
    failure: tuple[str, str] | None = None


class Harness(Protocol):
    """Runs a task's MCP operations; one `OperationResult` per operation that ran.

    A harness that keeps something across runs (the scripted harness's shared MCP
    sessions) may define `async aclose()`: the runtime calls it when it stops.
    """

    name: str

    async def run(
        self, task: HarnessTask, resolve_input: InputResolver
    ) -> list[OperationResult] | HarnessOutcome: ...
