"""The built-in deterministic `scripted` harness: a real MCP client that runs a script.

It connects to the task's server with the official MCP SDK (stdio subprocess or
Streamable HTTP), declares form and URL elicitation, and runs the script's
operations in order. Whenever the server asks for input, it hands an
`InputRound` to the injected resolver and delivers the answers:

- legacy (`elicitation/create` while the server holds the call open): the SDK
  calls our elicitation callback; one request per round, answered with the
  resolver's `ElicitResult`. Rounds of one operation never overlap.
- 2026-07-28 multi round-trip: every call is sent with
  `allow_input_required=True`, so an `InputRequiredResult` comes back to us;
  each one with input requests is a round, and the same call is retried with
  `input_responses` (keyed by the server's keys) and the round's `request_state`.
  Only its elicitations are the round: `roots/list` entries are answered from
  the binding's `roots`, and sampling entries get no response (2026-07-28 has
  no per-request error); a legacy `roots/list` gets the same roots and a legacy
  `sampling/createMessage` the SDK's "Sampling not supported" error.
- URL elicitation required (JSON-RPC -32042, 2025-11-25): the URL elicitations
  the error lists are one round; once every one is accepted the original call
  is sent again (a decline/cancel fails the operation
  `url_elicitation_declined`/`url_elicitation_cancelled`). The
  `notifications/elicitation/complete` received while an operation runs are
  recorded in its result's `_meta["m3/elicitation_complete"]`.

- MCP tasks (2025-11-25, `m3grpc.harness.mcp_tasks`): a step with `task` (and
  every tool whose `execution.taskSupport` is "required") is sent as a
  task-augmented `tools/call`; M3 polls `tasks/get`, then fetches `tasks/result`,
  over which the server sends the task's elicitations (rounds whose
  `turn_metadata` records the task). A task-augmented `elicitation/create` is run
  as an M3 client task the server polls. A task left unfinished (an abort, the
  run cancelled) gets `tasks/cancel`.

A binding pinned to 2026-07-28 connects by probing and fails the operation
`protocol_mismatch` when the server offers only an older protocol.

Nothing cuts a resolver's wait short: the SDK sets no request timeout unless
asked (we never ask), stdio has none, and for HTTP the session's httpx client
(`m3grpc.harness.http_clients`) has no read timeout (the SDK's default
300 s read timeout would cut a held legacy elicitation stream). A 2026-07-28
server may still expire the `request_state` it handed out (the MCP Python SDK
seals it with a 10-minute TTL by default); a late retry then fails with `request_state_rejected`.

Each round counts toward `task.round_limit`; a request for one more round fails
the operation with `round_limit_exceeded` without calling the resolver (a held
legacy call is cancelled). Unselected tools fail with `tool_not_selected`
before any server contact (the server starts only when an operation needs it).

Failures, per operation (see the codes in `m3grpc.harness.base`): the
operation's `OperationResult` records them and the script goes on, except:

- the resolver raised an `M3Error` (e.g. `OperationTimeout`): the operation is
  recorded failed with `failure_code = error.reason.lower()`, the error is
  logged with its traceback, and the script stops (a timed-out or invalid
  managed round cannot be answered later). `run` returns the results, so the
  runtime sees the failure as data.
- the connection could not be opened or was lost: recorded, script stops.
- a form request whose schema MCP does not allow (`m3grpc.form_schema`, e.g.
  a nested object property) is refused before it reaches the resolver: no
  answer to it could be delivered. The operation fails
  `invalid_elicitation_schema` (a held legacy call is cancelled).
- the resolver raised anything else (a bug) or the run was cancelled: the
  exception propagates unchanged after the connection is closed.

The MCP connection (and any stdio subprocess) is closed when `run` returns or
raises, cancellation included, except for a binding pinned to 2026-07-28 over
HTTP, or an "auto" one whose server answered `server/discover` offering 2026-07-28
(remembered per process): its executions share one session per (URL, headers) in an
event loop (`m3grpc.harness.shared_sessions`), and `run` only sends its own requests on it
(they also share the server's `tools/list` answer while its 2026-07-28 `ttlMs` says it is
fresh; without that hint each execution lists the tools itself).
Cancelling the run cancels those requests; what the server sends with one of them
reaches this run's callbacks; a request's HTTP failure fails that operation
`connection_closed`; the session closes a few seconds after its last execution
ends, or at `aclose` (the runtime stopping).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import weakref
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from contextlib import AsyncExitStack
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
import anyio.lowlevel
from mcp import Client, MCPError, StdioServerParameters
from mcp.client import Transport
from mcp.client.caching import CacheConfig
from mcp.client.session import ClientRequestContext, IncomingMessage
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import UrlElicitationRequiredError
from mcp_types import (
    CONNECTION_CLOSED as MCP_CONNECTION_CLOSED,
)
from mcp_types import (
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    URL_ELICITATION_REQUIRED,
    CallToolResult,
    DiscoverResult,
    ElicitCompleteNotification,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitRequestParams,
    ElicitResult,
    ErrorData,
    GetPromptResult,
    Implementation,
    InputRequests,
    InputRequiredResult,
    InputResponses,
    ListRootsRequest,
    ListRootsResult,
    ReadResourceResult,
    Root,
    ServerCapabilities,
    Task,
    TextContent,
    Tool,
)
from pydantic import ValidationError

from m3grpc import tracing
from m3grpc.errors import M3Error
from m3grpc.form_schema import form_schema_problem
from m3grpc.harness.base import (
    CONNECTION_CLOSED,
    INVALID_ELICITATION_SCHEMA,
    INVALID_INPUT_RESPONSE,
    INVALID_SERVER_RESULT,
    MCP_ERROR,
    PROTOCOL_MISMATCH,
    REQUEST_STATE_REJECTED,
    RESUME_UNAVAILABLE,
    ROUND_LIMIT_EXCEEDED,
    SERVER_UNAVAILABLE,
    TASK_CANCELLED,
    TASK_FAILED,
    TASK_NOT_SUPPORTED,
    TOOL_ERROR,
    TOOL_NOT_FOUND,
    TOOL_NOT_SELECTED,
    UNSUPPORTED_INPUT_REQUEST,
    URL_ELICITATION_CANCELLED,
    URL_ELICITATION_DECLINED,
    HarnessTask,
    InputResolver,
    InputRound,
    OperationRef,
    OperationStep,
    operation_id,
)
from m3grpc.harness.contained_http import PostDispatcher
from m3grpc.harness.contained_session import SessionDispatcher
from m3grpc.harness.diagnostics import StderrTail, connect_failure, connection_lost
from m3grpc.harness.http_clients import HttpClients, binding_key
from m3grpc.harness.mcp_convert import domain_request, dump_result, elicit_results
from m3grpc.harness.mcp_tasks import (
    RELATED_TASK_META,
    ClientTasks,
    TaskAwareSession,
    TaskClient,
    related_task_id,
)
from m3grpc.harness.request_keys import (
    legacy_request_key,
    mrtr_request_keys,
    url_required_request_keys,
)
from m3grpc.harness.shared_sessions import Lease, SharedSessions, current_user
from m3grpc.servers import HttpServer, ServerBinding, StdioServer, stdio_environment
from m3grpc.types import ElicitationResponse, OperationResult

logger = logging.getLogger(__name__)

CLIENT_INFO = Implementation(name="m3-scripted-harness", version="0.1.0")

# An InputRequiredResult with only request_state is a "come back later", not a
# round: retry with backoff (as the SDK's own driver does), a bounded number of times.
_STATE_ONLY_RETRY_LIMIT = 64
_STATE_ONLY_BACKOFF_SECONDS = (0.05, 0.25)
_TOOL_LIST_PAGE_LIMIT = 100
# Up to this many selection entries and script steps, an execution's plan is made on
# the event loop (a few microseconds) rather than in a worker thread.
_INLINE_PLAN_ENTRIES = 64
# Polling a task: the server's `pollInterval`, kept within these bounds (seconds).
_TASK_POLL_SECONDS = (0.05, 30.0)
_TASK_POLL_DEFAULT_SECONDS = 1.0
# How long M3 waits for the server to acknowledge `tasks/cancel` of an abandoned task.
_TASK_CANCEL_TIMEOUT_SECONDS = 10.0

MRTR_PROTOCOL = "2026-07-28"
# Failures after which a binding's remembered discover answer is dropped.
_DISCOVER_STALE = frozenset({CONNECTION_CLOSED, MCP_ERROR, INVALID_SERVER_RESULT})
# Where an operation result records the `notifications/elicitation/complete`
# the server sent while the operation ran: `result["_meta"][...]`, a list of elicitationIds.
META_ELICITATION_COMPLETE = "m3/elicitation_complete"
# Where a task-augmented call's result records its task: `result["_meta"][...]`,
# `{"taskId": ..., "status": ...}` as the last `tasks/get` reported it.
META_TASK = "m3/task"

_Reply = CallToolResult | GetPromptResult | ReadResourceResult | InputRequiredResult


class ScriptedHarness:
    """Runs `task.script` (or each selected tool once) against a real MCP server."""

    name = "scripted"

    def __init__(self, *, client_info: Implementation | None = None) -> None:
        self._client_info = client_info or CLIENT_INFO
        self._http = HttpClients()
        # The 2026-07-28 HTTP sessions its executions share, per event loop.
        self._shared: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, SharedSessions] = (
            weakref.WeakKeyDictionary()
        )

    async def run(self, task: HarnessTask, resolve_input: InputResolver) -> list[OperationResult]:
        return await self._new_run(task, resolve_input).execute()

    def operations(self, task: HarnessTask, resolve_input: InputResolver) -> McpOperations:
        """The execution's connection to its server, for operations run one at a time
        as something else (an agent, through `m3grpc.harness.relay`) asks for them."""
        return McpOperations(self._new_run(task, resolve_input))

    def _new_run(self, task: HarnessTask, resolve_input: InputResolver) -> _Run:
        loop = asyncio.get_running_loop()
        shared = self._shared.get(loop)
        if shared is None:
            shared = self._shared[loop] = SharedSessions()
        return _Run(task, resolve_input, self._client_info, self._http, shared)

    async def aclose(self) -> None:
        """Close this event loop's shared sessions once no execution uses them, and its
        HTTP connections (the runtime calls it when it stops)."""
        shared = self._shared.get(asyncio.get_running_loop())
        if shared is not None:
            await shared.aclose()
        await self._http.aclose()


@dataclass
class _ActiveOperation:
    """The operation in flight, shared with the legacy elicitation callback."""

    ref: OperationRef
    round_limit: int
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    rounds: int = 0
    # elicitationIds of `notifications/elicitation/complete` received meanwhile.
    completed_elicitations: list[str] = field(default_factory=list)
    failure: tuple[str, str] | None = None
    error: BaseException | None = None
    # For a task-augmented call (2025-11-25): the requested TTL in ms (None: the server's).
    task_ttl_ms: int | None = None
    # The operation's span: legacy elicitations arrive in the session's own task,
    # so their rounds make it current to be its children.
    span: tracing.Span = tracing.NOOP_SPAN

    @property
    def aborted(self) -> bool:
        return self.failure is not None or self.error is not None

    def abort(
        self, *, failure: tuple[str, str] | None = None, error: BaseException | None = None
    ) -> None:
        # The first reason wins; cancelling the scope unblocks the pending MCP call.
        if not self.aborted:
            self.failure, self.error = failure, error
        self.scope.cancel()


@dataclass(frozen=True)
class _Planned:
    step: OperationStep
    schema_defaults: bool  # arguments come from the tool's input schema (no script)


@dataclass(frozen=True)
class _Outcome:
    result: OperationResult | None
    stop: bool = False
    # Re-raised by `execute` once the connection is closed, so it surfaces
    # as itself rather than wrapped in the SDK's task-group ExceptionGroups.
    error: BaseException | None = None


@dataclass
class _SplitRequests:
    """A 2026-07-28 round's input requests, by who answers them."""

    elicitations: dict[str, ElicitRequestParams] = field(default_factory=dict)
    automatic: InputResponses = field(default_factory=dict)  # roots/list answers
    refused: list[str] = field(default_factory=list)  # sampling: not answered


@dataclass(frozen=True)
class _Stop:
    """The operation ends here: `outcome` (None: aborted, see `_ActiveOperation`)."""

    outcome: _Outcome | None


def _failed(ref: OperationRef, code: str, message: str, *, stop: bool = False) -> _Outcome:
    return _Outcome(ref.failed(code, message), stop=stop)


def _refusal(message: str) -> ErrorData:
    return ErrorData(code=INVALID_REQUEST, message=message)


class _Run:
    """One `ScriptedHarness.run`: the connection and the operation in flight."""

    def __init__(
        self,
        task: HarnessTask,
        resolve: InputResolver,
        client_info: Implementation,
        http: HttpClients,
        shared: SharedSessions,
    ) -> None:
        self._task = task
        self._http = http
        self._shared = shared
        self._lease: Lease | None = None  # on a shared session (see _connect)
        self._resolver = resolve
        self._client_info = client_info
        self._client: Client | None = None
        self._tools: dict[str, Tool] | None = None
        self._active: _ActiveOperation | None = None
        self._stderr: StderrTail | None = None  # a stdio server's last stderr lines

    def _plan(self) -> tuple[frozenset[str], list[_Planned]]:
        selected = self._task.selected_tools()
        if self._task.script is None:
            plan = [
                _Planned(OperationStep("tool", name), schema_defaults=True) for name in selected
            ]
        else:
            plan = [_Planned(step, schema_defaults=False) for step in self._task.script]
        return frozenset(selected), plan

    async def execute(self) -> list[OperationResult]:
        # A shared session's callbacks find this run through the context of its requests.
        token = current_user.set(self)
        try:
            return await self._execute()
        finally:
            current_user.reset(token)

    async def _execute(self) -> list[OperationResult]:
        # A set for the per-step check; off the event loop when the selection or
        # the script is long (a short one costs less than the thread hand-off).
        if len(self._task.tools) + len(self._task.script or ()) <= _INLINE_PLAN_ENTRIES:
            selected_set, plan = self._plan()
        else:
            selected_set, plan = await anyio.to_thread.run_sync(self._plan)
        results: list[OperationResult] = []
        error: BaseException | None = None
        resume = self._task.resume
        if resume is not None:
            # A released execution: the operations before the round's finished
            # under another worker (their results are stored); they are not re-run.
            results = list(resume.completed)
            if not 0 <= resume.operation_index < len(plan):
                stored = resume.round.operation
                failed = _failed(
                    stored,
                    RESUME_UNAVAILABLE,
                    f"the stored round's operation {stored.logical_operation_id} is unplanned",
                )
                assert failed.result is not None
                return [*results, failed.result]
        # The stack owns the connection: it closes (and a stdio server is
        # stopped) however this block exits, cancellation included.
        async with AsyncExitStack() as stack:
            for index, planned in enumerate(plan):
                resumed: InputRound | None = None
                if resume is not None:
                    if index < resume.operation_index:
                        continue
                    if index == resume.operation_index:
                        resumed = resume.round
                # Let other work run between operations: a step that fails at once
                # (an unknown tool) never yields, and a script may be long.
                await anyio.sleep(0)
                outcome = await self._explain_lost_connection(
                    await self._run_one(stack, index, planned, selected_set, resumed)
                )
                last = index == len(plan) - 1 or outcome.stop or outcome.error is not None
                if outcome.result is not None:
                    results.append(outcome.result)
                    await self._report_finished(outcome.result, last=last)
                if outcome.error is not None:
                    error = outcome.error
                if last:
                    break
            if self._lease is None and self._client is not None:
                # Its own session is about to close (a DELETE, a stdio server
                # stopping): that takes time, and a crash meanwhile must not cost
                # the last operation's result (a shared session has nothing to close).
                hook = getattr(self._resolver, "connection_closing", None)
                if hook is not None:
                    await hook()
        if error is not None:
            raise error
        return results

    async def _explain_lost_connection(self, outcome: _Outcome) -> _Outcome:
        if outcome.result is not None and outcome.result.failure_code in _DISCOVER_STALE:
            self._forget_discover()  # the server may have restarted as another version
        # A stdio server that died mid-session said why on its stderr: quote its
        # last lines (waiting, boundedly, for the dead process's stderr to drain).
        result = outcome.result
        if result is None or result.failure_code != CONNECTION_CLOSED or self._stderr is None:
            return outcome
        message = connection_lost(result.failure_message or "", await self._stderr.drained())
        return replace(outcome, result=result.model_copy(update={"failure_message": message}))

    async def _report_finished(self, result: OperationResult, *, last: bool) -> None:
        # Optional hook (see InputResolver), called before the connection closes:
        # the answers handed out for this operation reached the server if it
        # completed, and the resolver can make the result durable at once.
        hook = getattr(self._resolver, "operation_finished", None)
        if hook is not None:
            await hook(result, last=last)

    async def _report_input(self, active: _ActiveOperation, hook_name: str) -> bool:
        """Call the resolver's optional `input_delivered`/`input_requested` hook;
        False (and the operation aborted) if it raised."""
        hook = getattr(self._resolver, hook_name, None)
        if hook is None:
            return True
        try:
            await hook(active.ref)
        except BaseException as exc:
            active.abort(error=exc)
            if not isinstance(exc, Exception):
                raise
            return False
        return True

    def _ref(self, index: int, step: OperationStep, arguments: Mapping[str, Any]) -> OperationRef:
        return OperationRef(
            logical_operation_id=operation_id(index),
            server=self._task.server.name,
            operation_kind=step.kind,
            operation_name=step.name,
            arguments=dict(arguments),
        )

    async def _run_one(
        self,
        stack: AsyncExitStack,
        index: int,
        planned: _Planned,
        selected: AbstractSet[str],
        resumed: InputRound | None = None,
    ) -> _Outcome:
        step = planned.step
        ref = self._ref(index, step, step.arguments)
        if resumed is not None:
            stored = resumed.operation
            if (stored.logical_operation_id, stored.operation_kind, stored.operation_name) != (
                ref.logical_operation_id,
                ref.operation_kind,
                ref.operation_name,
            ) or _resume_keys(resumed) is None:
                return _failed(
                    ref,
                    RESUME_UNAVAILABLE,
                    f"the stored round of {stored.logical_operation_id} "
                    f"({stored.operation_kind} {stored.operation_name!r}) cannot resume this plan",
                    stop=True,
                )
        if step.kind == "tool" and step.name not in selected:
            return _failed(
                ref,
                TOOL_NOT_SELECTED,
                f"tool {ref.server}:{step.name} is not in the execution's tool selection",
            )
        if self._client is None and (failure := await self._open(stack)) is not None:
            return _failed(ref, *failure, stop=True)
        arguments: Mapping[str, Any] = step.arguments
        if step.kind == "tool":
            try:
                tool = (await self._listed_tools()).get(step.name)
            except (MCPError, ValidationError) as exc:
                return self._sdk_failure(ref, exc)
            if tool is None:
                return _failed(
                    ref, TOOL_NOT_FOUND, f"server {ref.server!r} lists no tool {step.name!r}"
                )
            if planned.schema_defaults:
                arguments = _schema_defaults(tool.input_schema)
                ref = self._ref(index, step, arguments)
            support = tool.execution.task_support if tool.execution is not None else None
            if step.task and support not in ("optional", "required"):
                return _failed(
                    ref,
                    TASK_NOT_SUPPORTED,
                    f"tool {ref.server}:{step.name} does not support task-augmented calls "
                    f"(execution.taskSupport is {support or 'absent'})",
                )
            if step.task or support == "required":
                ttl = step.task_ttl_seconds
                return await self._operate(
                    ref, as_task=True, task_ttl_ms=None if ttl is None else round(ttl * 1000)
                )
        if resumed is not None:
            # The retry carries exactly the arguments of the call that asked.
            ref = resumed.operation
        return await self._operate(ref, resumed)

    async def _open(self, stack: AsyncExitStack) -> tuple[str, str] | None:
        """Connect to the server; None, or the failure (code, message) if it cannot be."""
        try:
            self._client = await self._connect(stack)
        except _ProtocolMismatch as exc:
            return PROTOCOL_MISMATCH, _mismatch_message(self._task.server, exc.offered)
        except Exception as exc:  # spawn, network and handshake failures alike
            self._forget_discover()  # the server may have changed: ask it next time
            name = self._task.server.name
            # One line: the server's stderr is in the log already, a record a line,
            # and the SDK's nested task-group traceback only at DEBUG.
            logger.warning(
                "cannot connect to MCP server %r: %s",
                name,
                connect_failure(self._task.server, exc, None),
            )
            logger.debug("connecting to MCP server %r failed", name, exc_info=True)
            tail = await self._stderr.drained() if self._stderr is not None else None
            return SERVER_UNAVAILABLE, connect_failure(self._task.server, exc, tail)
        return None

    async def _connect(self, stack: AsyncExitStack) -> Client:
        server = self._task.server
        if isinstance(server, HttpServer) and self._speaks_mrtr(server):
            # 2026-07-28 over HTTP: the server keeps no session state, so the
            # binding's executions share one session (see shared_sessions).
            opener = _SharedOpener(server, self._http, self._client_info)
            try:
                lease = await self._shared.acquire(binding_key(server.url, server.headers), opener)
            except _ProtocolMismatch:
                if server.protocol == MRTR_PROTOCOL:
                    raise
                # "auto", and the server no longer offers 2026-07-28: a session of its own.
            else:
                stack.callback(lease.release)
                self._lease = lease
                return lease.client
        target: StdioServerParameters | Transport | str
        dispatcher: SessionDispatcher | None = None
        if isinstance(server, StdioServer):
            parameters = StdioServerParameters(
                command=server.command,
                args=list(server.args),
                env=stdio_environment(server),
                cwd=server.cwd,
            )
            # The server's stderr goes through a bounded tail, so that a server
            # that dies (e.g. `No module named 'mcp'`) can be reported with its cause.
            self._stderr = StderrTail(server.name)
            target = stdio_client(parameters, errlog=self._stderr.errlog)
        else:
            # The session's own client (its connections from the loop's pool, see http_clients).
            http = self._http.client(server.headers)
            await stack.enter_async_context(http)
            # Each request one POST from its caller's task (see contained_session).
            dispatcher = SessionDispatcher(server.url, http)
            target = server.url
        mode: str = server.protocol
        prior: DiscoverResult | None = None
        if server.protocol == MRTR_PROTOCOL:
            # A pinned 2026-07-28 binding connects as "auto" (discover, else the
            # initialize handshake) so that a legacy-only server is recognised
            # and reported (`protocol_mismatch`) instead of failing its first call;
            # once the server has answered discover, later sessions adopt that answer.
            prior = self._known_discover()
            mode = MRTR_PROTOCOL if prior is not None else "auto"
        client = _task_client(target, mode, prior, self, self._client_info, dispatcher=dispatcher)
        try:
            entered = await stack.enter_async_context(client)
        finally:
            if self._stderr is not None:
                self._stderr.release_writer()  # the spawn is over; the server holds its copy
        return _adopted(entered, server, prior, self._http)

    def _speaks_mrtr(self, server: HttpServer) -> bool:
        """Whether the binding's executions speak 2026-07-28: pinned to it, or "auto"
        with a server whose remembered `server/discover` answer offers it (the
        negotiation would pick it: it is the newest protocol M3 speaks)."""
        if server.protocol == MRTR_PROTOCOL:
            return True
        if server.protocol != "auto":
            return False
        known = self._http.discovered(server.url, server.headers)
        return known is not None and MRTR_PROTOCOL in known.supported_versions

    def _known_discover(self) -> DiscoverResult | None:
        server = self._task.server
        if isinstance(server, StdioServer):
            return None  # a new process each time: it is asked
        return self._http.discovered(server.url, server.headers)

    def _forget_discover(self) -> None:
        server = self._task.server
        if not isinstance(server, StdioServer):
            self._http.forget_discovered(server.url, server.headers)
        if self._lease is not None:
            self._lease.retire()  # the next execution opens a session and asks again

    async def _listed_tools(self) -> dict[str, Tool]:
        if self._tools is None:
            assert self._client is not None
            tools: dict[str, Tool] = {}
            cursor: str | None = None
            try:
                for _ in range(_TOOL_LIST_PAGE_LIMIT):
                    # Through the client's response cache: a shared 2026-07-28 session
                    # serves a first page the server marked fresh (`ttlMs`).
                    page = await self._client.list_tools(cursor=cursor)
                    tools.update((tool.name, tool) for tool in page.tools)
                    if (cursor := page.next_cursor) is None:
                        break
            except MCPError as exc:
                if exc.code != METHOD_NOT_FOUND:
                    raise
                # A server without tools lists none.
            self._tools = tools
        return self._tools

    async def _operate(
        self,
        ref: OperationRef,
        resumed: InputRound | None = None,
        *,
        as_task: bool = False,
        task_ttl_ms: int | None = None,
    ) -> _Outcome:
        with tracing.span(
            "m3.operation",
            attributes={
                "m3.execution_id": self._task.execution_id,
                "m3.logical_operation_id": ref.logical_operation_id,
                "m3.server": ref.server,
                "m3.operation.kind": ref.operation_kind,
                "m3.operation.name": ref.operation_name,
                "m3.operation.as_task": as_task,
                "m3.resumed": resumed is not None,
            },
        ) as span:
            outcome = await self._operate_traced(ref, resumed, as_task, task_ttl_ms, span)
            if outcome.result is not None:
                span.set_attribute("m3.outcome", "ok" if outcome.result.ok else "failed")
                if outcome.result.failure_code:
                    span.fail(outcome.result.failure_code)
            return outcome

    async def _operate_traced(
        self,
        ref: OperationRef,
        resumed: InputRound | None,
        as_task: bool,
        task_ttl_ms: int | None,
        span: tracing.Span,
    ) -> _Outcome:
        started = getattr(self._resolver, "operation_started", None)
        if started is not None:
            await started(ref)
        active = _ActiveOperation(ref, self._task.round_limit, task_ttl_ms=task_ttl_ms, span=span)
        self._active = active
        outcome: _Outcome | None = None
        try:
            with active.scope:
                outcome = await (
                    self._drive_task(active) if as_task else self._drive(active, resumed)
                )
        finally:
            self._active = None
        if active.error is not None:
            if not isinstance(active.error, M3Error):
                return _Outcome(None, error=active.error)
            logger.warning(
                "operation %s (%s %r) of execution %s failed: input resolver raised %s",
                ref.logical_operation_id,
                ref.operation_kind,
                ref.operation_name,
                self._task.execution_id,
                type(active.error).__name__,
                exc_info=active.error,
            )
            return _failed(ref, active.error.reason.lower(), str(active.error), stop=True)
        if active.failure is not None:
            return _failed(ref, *active.failure)
        assert outcome is not None, "the operation scope is only cancelled by an abort"
        return outcome

    async def _drive(
        self, active: _ActiveOperation, resumed: InputRound | None = None
    ) -> _Outcome | None:
        """Send the operation, resolving MRTR rounds until a final result (None if
        aborted). `resumed`: the operation's stored round (another worker sent the
        call and got it): its answers are obtained first and the retry sent with
        its request_state, so the call is not sent afresh."""
        ref = active.ref
        responses: InputResponses | None = None
        state: str | None = None
        if resumed is not None:
            active.rounds = resumed.round_index
            responses = await self._resumed_round(active, resumed)
            if responses is None:
                return None
            state = resumed.request_state
        state_only = 0
        unattended = 0  # retries that carried only automatic answers (roots)
        delay = _STATE_ONLY_BACKOFF_SECONDS[0]
        while True:
            try:
                reply = await self._send(ref, responses, state)
            except MCPError as exc:
                if exc.code != URL_ELICITATION_REQUIRED:
                    return self._sdk_failure(ref, exc)
                # The user must complete URL elicitations first: a round; once
                # consented, the original call is sent again (a new round if the
                # server answers the retry with the error again).
                stop = await self._url_required_round(active, exc)
                if stop is not None:
                    return stop.outcome
                responses, state = None, None
                continue
            except (ValidationError, RuntimeError) as exc:
                return self._sdk_failure(ref, exc)
            if not isinstance(reply, InputRequiredResult):
                return _Outcome(_completed(ref, reply, active.completed_elicitations))
            if responses is not None:
                # The server answered a retry that carried answers: they reached
                # it, and new requests mean it asked again (even past the limit).
                hook = "input_requested" if reply.input_requests else "input_delivered"
                if not await self._report_input(active, hook):
                    return None
            state = reply.request_state
            responses = None
            if not reply.input_requests:
                state_only += 1
                if state_only > _STATE_ONLY_RETRY_LIMIT:
                    return _failed(
                        ref,
                        ROUND_LIMIT_EXCEEDED,
                        "server kept answering input_required without requests",
                    )
                await anyio.sleep(delay)
                delay = min(delay * 2, _STATE_ONLY_BACKOFF_SECONDS[1])
                continue
            split = self._split_requests(reply.input_requests)
            if not split.elicitations:
                # Nothing for a human: answered at once (roots), or nothing to answer.
                if not split.automatic:
                    return _failed(
                        ref,
                        UNSUPPORTED_INPUT_REQUEST,
                        f"cannot answer {', '.join(split.refused)}: M3 does not sample",
                    )
                unattended += 1
                if unattended > _STATE_ONLY_RETRY_LIMIT:
                    return _failed(
                        ref,
                        ROUND_LIMIT_EXCEEDED,
                        "server kept asking for input M3 answers without a round",
                    )
                responses = split.automatic
                continue
            if active.rounds >= active.round_limit:
                return _failed(ref, ROUND_LIMIT_EXCEEDED, _round_limit_message(active))
            answers = await self._mrtr_round(
                active, split.elicitations, reply.request_state, automatic=split.automatic
            )
            if answers is None:
                return None
            responses = {**split.automatic, **answers}

    def _task_session(self) -> TaskAwareSession:
        assert self._client is not None
        session = self._client.session
        assert isinstance(session, TaskAwareSession)
        return session

    async def _drive_task(self, active: _ActiveOperation) -> _Outcome | None:
        """A task-augmented `tools/call` (2025-11-25): create the task, poll
        `tasks/get` at the server's interval, then fetch `tasks/result`, which the
        server holds open while the task runs and over which it sends the task's
        elicitations (they come to `_on_elicit` with the related-task `_meta`).
        A task left unfinished (an abort, the execution cancelled) is cancelled
        with `tasks/cancel`."""
        ref = active.ref
        session = self._task_session()
        task_params: dict[str, Any] = {}
        if active.task_ttl_ms is not None:
            task_params["ttl"] = active.task_ttl_ms
        params = {"name": ref.operation_name, "arguments": dict(ref.arguments), "task": task_params}
        try:
            created = await self._create_task(session, ref, params)
        except MCPError as exc:
            return self._sdk_failure(ref, exc)
        try:
            if "task" not in created:
                # The server ran the call at once (task support is optional for it).
                reply = CallToolResult.model_validate(created, by_name=False)
                return _Outcome(_completed(ref, reply, active.completed_elicitations))
            task = Task.model_validate(created["task"], by_name=False)
        except ValidationError as exc:
            return self._sdk_failure(ref, exc)
        finished = False
        try:
            outcome = await self._follow_task(active, session, task)
            finished = True
            return outcome
        finally:
            if not finished:
                await self._cancel_task(session, ref, task.task_id)

    async def _create_task(
        self, session: TaskAwareSession, ref: OperationRef, params: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Send the task-augmented `tools/call`. A cancellation that lands while the
        server is creating the task still cancels it: the call runs on, shielded
        (asyncio, the runtime's loop), and its task is cancelled once it is known."""
        creation = asyncio.ensure_future(session.send_raw("tools/call", params))
        try:
            return await asyncio.shield(creation)
        except asyncio.CancelledError:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_TASK_CANCEL_TIMEOUT_SECONDS):
                try:
                    created = await creation
                except Exception:
                    created = {}
                task = created.get("task")
                if isinstance(task, Mapping) and isinstance(task.get("taskId"), str):
                    await self._cancel_task(session, ref, task["taskId"])
            creation.cancel()
            raise

    async def _follow_task(
        self, active: _ActiveOperation, session: TaskAwareSession, task: Task
    ) -> _Outcome:
        ref = active.ref
        try:
            while task.status == "working":
                interval = (
                    task.poll_interval / 1000
                    if task.poll_interval is not None
                    else _TASK_POLL_DEFAULT_SECONDS
                )
                await anyio.sleep(min(max(interval, _TASK_POLL_SECONDS[0]), _TASK_POLL_SECONDS[1]))
                polled = await session.send_raw("tasks/get", {"taskId": task.task_id})
                task = Task.model_validate(polled, by_name=False)
            if task.status == "cancelled":
                return _failed(
                    ref,
                    TASK_CANCELLED,
                    f"the server cancelled task {task.task_id}: {task.status_message or '-'}",
                )
            # input_required, completed or failed: tasks/result delivers what the
            # task needs (elicitations) and answers once it ended.
            raw = await session.send_raw("tasks/result", {"taskId": task.task_id})
        except MCPError as exc:
            if exc.code == MCP_CONNECTION_CLOSED or task.status != "failed":
                return self._sdk_failure(ref, exc)
            return _failed(ref, TASK_FAILED, f"task {task.task_id} failed: {exc.message}")
        except ValidationError as exc:
            return self._sdk_failure(ref, exc)
        try:
            reply = CallToolResult.model_validate(raw, by_name=False)
        except ValidationError as exc:
            return self._sdk_failure(ref, exc)
        result = _completed(ref, reply, active.completed_elicitations)
        record = dict(result.result or {})
        meta = dict(record.get("_meta") or {})
        meta[META_TASK] = {"taskId": task.task_id, "status": "completed" if result.ok else "failed"}
        record["_meta"] = meta
        return _Outcome(result.model_copy(update={"result": record}))

    async def _cancel_task(
        self, session: TaskAwareSession, ref: OperationRef, task_id: str
    ) -> None:
        """`tasks/cancel` for a task M3 no longer follows; shielded from the
        cancellation that got us here, bounded in time, and best effort."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(_TASK_CANCEL_TIMEOUT_SECONDS):
            try:
                await session.send_raw("tasks/cancel", {"taskId": task_id})
                logger.info("cancelled MCP task %s of %s", task_id, ref.operation_name)
            except Exception:
                logger.warning("could not cancel MCP task %s", task_id, exc_info=True)

    def _split_requests(self, requests: InputRequests) -> _SplitRequests:
        """A 2026-07-28 round's input requests by who answers them: elicitations a
        human (a round), `roots/list` the binding's roots, and sampling nobody: the
        retry carries no response for it (2026-07-28 has no per-request error; a
        legacy `sampling/createMessage` gets the JSON-RPC error "Sampling not supported")."""
        split = _SplitRequests()
        for wire_key, request in requests.items():
            if isinstance(request, ElicitRequest):
                split.elicitations[wire_key] = request.params
            elif isinstance(request, ListRootsRequest):
                split.automatic[wire_key] = self._roots()
            else:
                split.refused.append(f"{request.method!r} ({wire_key!r})")
        return split

    def _roots(self) -> ListRootsResult:
        return ListRootsResult(
            roots=[
                Root.model_validate({"uri": root.uri, "name": root.name})
                for root in self._task.server.roots
            ]
        )

    async def _on_list_roots(self, context: ClientRequestContext) -> ListRootsResult | ErrorData:
        """Legacy `roots/list`: the binding's roots (the same answer as in 2026-07-28)."""
        return self._roots()

    async def _send(
        self, ref: OperationRef, responses: InputResponses | None, state: str | None
    ) -> _Reply:
        assert self._client is not None
        session = self._client.session
        arguments = dict(ref.arguments)
        # No read timeout is passed: a round may wait on a human for minutes.
        if ref.operation_kind == "tool":
            return await session.call_tool(
                ref.operation_name,
                arguments,
                input_responses=responses,
                request_state=state,
                allow_input_required=True,
            )
        if ref.operation_kind == "prompt":
            return await session.get_prompt(
                ref.operation_name,
                {k: v if isinstance(v, str) else json.dumps(v) for k, v in arguments.items()},
                input_responses=responses,
                request_state=state,
                allow_input_required=True,
            )
        return await session.read_resource(
            ref.operation_name,
            input_responses=responses,
            request_state=state,
            allow_input_required=True,
        )

    async def _mrtr_round(
        self,
        active: _ActiveOperation,
        params: Mapping[str, ElicitRequestParams],
        request_state: str | None,
        *,
        automatic: InputResponses,
    ) -> InputResponses | None:
        """Resolve the elicitations of one InputRequiredResult as a round; their
        input_responses for the retry, or None if aborted."""
        for wire_key, request_params in params.items():
            if (problem := _schema_problem(wire_key, request_params)) is not None:
                active.abort(failure=(INVALID_ELICITATION_SCHEMA, problem))
                return None
        wire_keys = mrtr_request_keys(params)
        resume_token: str | None = None
        if self._task.server.protocol == MRTR_PROTOCOL:
            # Pinned to 2026-07-28: the server holds nothing open, so a fresh
            # process can send the retry (see InputRound.resume_token).
            resume_token = json.dumps(
                {"wire_keys": wire_keys, "roots": sorted(automatic)}, sort_keys=True
            )
        round = InputRound(
            operation=active.ref,
            round_index=active.rounds,
            requests={
                key: domain_request(params[wire], active.ref, fallback_elicitation_id=key)
                for key, wire in wire_keys.items()
            },
            request_state=request_state,
            protocol="mrtr",
            resume_token=resume_token,
        )
        results = await self._answered(active, round)
        if results is None:
            return None
        return {wire_keys[key]: result for key, result in results.items()}

    async def _resumed_round(
        self, active: _ActiveOperation, round: InputRound
    ) -> InputResponses | None:
        """A stored round's answers (from the resolver, which waits for them if
        needed) as the retry's input_responses, or None if aborted."""
        keys = _resume_keys(round)
        assert keys is not None, "checked by _run_one"
        wire_keys, roots = keys
        results = await self._answered(active, round)
        if results is None:
            return None
        responses: InputResponses = {wire: self._roots() for wire in roots}
        responses.update({wire_keys[key]: result for key, result in results.items()})
        return responses

    async def _url_required_round(self, active: _ActiveOperation, error: MCPError) -> _Stop | None:
        """A URL-elicitation-required error (-32042) as a round; None to retry the call."""
        ref = active.ref
        try:
            listed = UrlElicitationRequiredError.from_error(error.error).elicitations
        except (ValidationError, TypeError, AttributeError) as exc:
            return _Stop(_failed(ref, INVALID_SERVER_RESULT, f"malformed -32042 error data: {exc}"))
        if not listed:
            return _Stop(
                _failed(
                    ref,
                    INVALID_SERVER_RESULT,
                    f"URL elicitation required error listed no elicitations: {error.message}",
                )
            )
        if active.rounds >= active.round_limit:
            return _Stop(_failed(ref, ROUND_LIMIT_EXCEEDED, _round_limit_message(active)))
        keys = url_required_request_keys(listed)
        round = InputRound(
            operation=ref,
            round_index=active.rounds,
            requests={
                key: domain_request(listed[index], ref, fallback_elicitation_id=key)
                for key, index in keys.items()
            },
            request_state=None,
            protocol="legacy",
        )
        results = await self._answered(active, round)
        if results is None:
            return _Stop(None)
        for key, request in round.requests.items():
            action = results[key].action
            if action == "accept":
                continue
            code = URL_ELICITATION_DECLINED if action == "decline" else URL_ELICITATION_CANCELLED
            verb = "declined" if action == "decline" else "cancelled"
            return _Stop(
                _failed(
                    ref,
                    code,
                    f"the user {verb} URL elicitation {key!r} ({request.message}); "
                    f"the server's error was: {error.message}",
                )
            )
        return None

    def _on_notification(self, message: IncomingMessage) -> None:
        """Record `notifications/elicitation/complete` on the operation in flight."""
        active = self._active
        if active is not None and isinstance(message, ElicitCompleteNotification):
            active.completed_elicitations.append(message.params.elicitation_id)

    async def _on_message(self, message: IncomingMessage) -> None:
        self._on_notification(message)
        await anyio.lowlevel.checkpoint()

    async def _on_elicit(
        self, context: ClientRequestContext, params: ElicitRequestParams
    ) -> ElicitResult | ErrorData:
        """Legacy `elicitation/create`: runs in the session's task, not in `run`'s.
        One the server sends for a task (the related-task `_meta`) records that task."""
        return await self._elicit(params, related_task_id(params.meta))

    async def _on_task_elicit(
        self, context: ClientRequestContext, params: ElicitRequestParams, task_id: str
    ) -> ElicitResult | ErrorData:
        """A task-augmented `elicitation/create`: M3 runs it as client task
        `task_id` (the server polls it), and the round records that task."""
        meta = {**(params.meta or {}), RELATED_TASK_META: {"taskId": task_id}}
        return await self._elicit(params.model_copy(update={"meta": meta}), task_id)

    async def _elicit(
        self, params: ElicitRequestParams, task_id: str | None
    ) -> ElicitResult | ErrorData:
        active = self._active
        if active is None:
            return _refusal("no operation is waiting for input")
        with active.span.activate():
            return await self._elicit_round(active, params, task_id)

    async def _elicit_round(
        self, active: _ActiveOperation, params: ElicitRequestParams, task_id: str | None
    ) -> ElicitResult | ErrorData:
        # One round at a time: a server asking concurrently waits its turn.
        async with active.lock:
            if active.aborted:
                return _refusal("the operation was aborted")
            # The server asks again: answers handed out before reached it.
            if not await self._report_input(active, "input_requested"):
                return _refusal("the client could not record the request")
            key = legacy_request_key(params)
            if (problem := _schema_problem(key, params)) is not None:
                active.abort(failure=(INVALID_ELICITATION_SCHEMA, problem))
                return _refusal(problem)
            if active.rounds >= active.round_limit:
                message = _round_limit_message(active)
                active.abort(failure=(ROUND_LIMIT_EXCEEDED, message))
                return _refusal(message)
            round = InputRound(
                operation=active.ref,
                round_index=active.rounds,
                requests={key: domain_request(params, active.ref, fallback_elicitation_id=key)},
                request_state=None,
                protocol="legacy",
                turn_metadata=None
                if task_id is None
                else {"harness": "scripted", "mcp_task_id": task_id},
                # The SDK sends the answer once this callback returns it.
                sent_on_return=True,
            )
            active.rounds += 1
            try:
                answers = await self._resolve(round)
            except BaseException as exc:
                # Hand the error to `run`'s task (the scope cancel unblocks it);
                # a cancellation still unwinds this task.
                active.abort(error=exc)
                if not isinstance(exc, Exception):
                    raise
                return _refusal("the client could not obtain input")
            results = _check_answers(active, round, answers)
            if results is None:
                return _refusal("the client could not obtain valid input")
            # The SDK sends the answer once this callback returns, and nothing
            # acknowledges it: the round is marked delivered just before.
            if not await self._report_input(active, "input_delivered"):
                return _refusal("the client could not record the delivery")
            return results[key]

    async def _resolve(self, round: InputRound) -> Mapping[str, ElicitationResponse]:
        return await self._resolver(round)

    async def _answered(
        self, active: _ActiveOperation, round: InputRound
    ) -> dict[str, ElicitResult] | None:
        """Count the round, wait for its answers and check them: the ElicitResults to
        send, or None with the operation aborted (an M3Error is recorded; anything
        else is re-raised by _operate)."""
        active.rounds += 1
        try:
            answers = await self._resolve(round)
        except Exception as exc:
            active.abort(error=exc)
            return None
        return _check_answers(active, round, answers)

    def _sdk_failure(self, ref: OperationRef, exc: Exception) -> _Outcome:
        if isinstance(exc, MCPError):
            if exc.code == MCP_CONNECTION_CLOSED:
                return _failed(ref, CONNECTION_CLOSED, exc.message, stop=True)
            data = exc.error.data
            if isinstance(data, Mapping) and data.get("reason") == "invalid_request_state":
                return _failed(ref, REQUEST_STATE_REJECTED, exc.message)
            return _failed(ref, MCP_ERROR, f"MCP error {exc.code}: {exc.message}")
        return _failed(ref, INVALID_SERVER_RESULT, str(exc))


class McpOperations:
    """One execution's MCP connection, held open while an agent works and used one
    operation at a time as the agent asks (see `m3grpc.harness.relay`).

    Each operation runs exactly as a scripted step does (the same client: legacy
    elicitations and 2026-07-28 retries as rounds for the resolver, -32042, tasks,
    the selection check), so an agent's operations and a script's are alike.
    Operations are serialized: the client tracks one operation in flight, and the
    resolver's rounds follow one another. The connection lives in a task of its
    own (`open` starts it, `aclose` ends it) because the SDK's task groups must be
    left by the task that entered them.
    """

    def __init__(self, run: _Run) -> None:
        self._run = run
        self._turn = asyncio.Lock()
        self._closing = asyncio.Event()
        self._keeper: asyncio.Task[None] | None = None

    async def open(self) -> tuple[str, str] | None:
        """Connect (a stdio server is started); None, or why it failed (code, message)."""
        opened: asyncio.Future[tuple[str, str] | None] = asyncio.get_running_loop().create_future()
        self._keeper = asyncio.create_task(self._keep(opened), name="m3-mcp-operations")
        return await opened

    async def _keep(self, opened: asyncio.Future[tuple[str, str] | None]) -> None:
        # A shared session's callbacks find the run through the context of its requests.
        current_user.set(self._run)
        try:
            async with AsyncExitStack() as stack:
                failure = await self._run._open(stack)
                opened.set_result(failure)
                if failure is not None:
                    return
                await self._closing.wait()
                if self._run._lease is None:
                    # As a script's own connection: what the resolver holds back is
                    # stored before a stdio server's stop or a DELETE (see _execute).
                    hook = getattr(self._run._resolver, "connection_closing", None)
                    if hook is not None:
                        await hook()
        except BaseException as exc:
            if not opened.done():
                opened.set_exception(exc)
            raise

    def _client(self) -> Client:
        client = self._run._client
        if client is None:
            raise RuntimeError("the MCP connection is not open")
        return client

    @property
    def server_info(self) -> Implementation | None:
        return self._client().server_info

    @property
    def capabilities(self) -> ServerCapabilities:
        return self._client().server_capabilities

    @property
    def instructions(self) -> str | None:
        return self._client().instructions

    async def tools(self) -> list[Tool]:
        """The server's tools (every page), as listed once for this connection."""
        token = current_user.set(self._run)
        try:
            return list((await self._run._listed_tools()).values())
        finally:
            current_user.reset(token)

    async def call(self, method: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """A plain request to the server (a listing), its result as the server sent it."""
        token = current_user.set(self._run)
        try:
            return await self._run._task_session().send_raw(method, dict(params or {}))
        finally:
            current_user.reset(token)

    async def run(
        self,
        index: int,
        step: OperationStep,
        *,
        amend: Callable[[OperationResult], OperationResult] | None = None,
    ) -> tuple[OperationResult, bool]:
        """Run `step` as the execution's `index`-th operation: its result (passed
        through `amend` before the resolver hears of it), and whether the execution
        cannot go on (its round timed out, the connection is lost)."""
        async with self._turn:
            token = current_user.set(self._run)
            try:
                return await self._run_step(index, step, amend)
            finally:
                current_user.reset(token)

    async def _run_step(
        self,
        index: int,
        step: OperationStep,
        amend: Callable[[OperationResult], OperationResult] | None,
    ) -> tuple[OperationResult, bool]:
        run = self._run
        if step.kind == "tool" and run._task.tools:
            selected = frozenset(run._task.selected_tools())
        else:
            # No selection: an agent is offered every tool (its approvals decide).
            selected = frozenset(await run._listed_tools()) if step.kind == "tool" else frozenset()
        async with AsyncExitStack() as unused:  # connected already: nothing enters it
            outcome = await run._run_one(unused, index, _Planned(step, False), selected)
        outcome = await run._explain_lost_connection(outcome)
        if outcome.error is not None:
            raise outcome.error
        assert outcome.result is not None
        result = outcome.result if amend is None else amend(outcome.result)
        await run._report_finished(result, last=False)
        return result, outcome.stop

    async def aclose(self) -> None:
        """Close the connection (a stdio server is stopped); idempotent."""
        self._closing.set()
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            with contextlib.suppress(Exception):
                await keeper


class _ProtocolMismatch(Exception):
    """The server does not speak the protocol its binding is pinned to; it `offered`."""

    def __init__(self, offered: str) -> None:
        super().__init__(offered)
        self.offered = offered


class _SharedOpener:
    """Opens the session a 2026-07-28 HTTP binding's executions share
    (`m3grpc.harness.shared_sessions`): on the binding's own HTTP client, probing
    `server/discover` unless its answer is known, with callbacks that hand what the
    server sends to the execution whose request it came with."""

    def __init__(self, server: HttpServer, http: HttpClients, client_info: Implementation) -> None:
        self._server = server
        self._http = http
        self._client_info = client_info

    async def __call__(self, stack: AsyncExitStack) -> Client:
        server = self._server
        http = self._http.client(server.headers, shared=True)
        await stack.enter_async_context(http)
        prior = self._http.discovered(server.url, server.headers)
        client = _task_client(
            server.url,
            MRTR_PROTOCOL if prior is not None else "auto",
            prior,
            _ROUTED,
            self._client_info,
            dispatcher=PostDispatcher(server.url, http),
            # The binding's executions share its listings while the server says they
            # are fresh: only a 2026-07-28 result's own `ttlMs` counts (the SDK ignores
            # hints on older sessions, and `default_ttl_ms` 0 caches nothing unmarked).
            # A script sees the server's current listings otherwise: a session of an
            # execution's own lists once per execution.
            cache=CacheConfig(),
        )
        entered = await stack.enter_async_context(client)
        # Only a stateless session can be shared (also for an "auto" binding).
        return _adopted(entered, server, prior, self._http, stateless_only=True)


def _user() -> _Run | None:
    """The execution whose request brought the message (see `shared_sessions`)."""
    user = current_user.get(None)
    return user if isinstance(user, _Run) else None


class _Routed:
    """A shared session's handlers: each hands what the server sent to the execution
    whose request it came with (`_user`), as a session of its own would."""

    async def _on_elicit(
        self, context: ClientRequestContext, params: ElicitRequestParams
    ) -> ElicitResult | ErrorData:
        run = _user()
        if run is None:
            return _refusal("no operation is waiting for input")
        return await run._on_elicit(context, params)

    async def _on_task_elicit(
        self, context: ClientRequestContext, params: ElicitRequestParams, task_id: str
    ) -> ElicitResult | ErrorData:
        run = _user()
        if run is None:
            return _refusal("no operation is waiting for input")
        return await run._on_task_elicit(context, params, task_id)

    async def _on_list_roots(self, context: ClientRequestContext) -> ListRootsResult | ErrorData:
        run = _user()
        if run is None:
            return ListRootsResult(roots=[])
        return await run._on_list_roots(context)

    async def _on_message(self, message: IncomingMessage) -> None:
        run = _user()
        if run is not None:
            run._on_notification(message)
        await anyio.lowlevel.checkpoint()


_ROUTED = _Routed()


def _task_client(
    target: StdioServerParameters | Transport | str,
    mode: str,
    prior: DiscoverResult | None,
    handlers: _Run | _Routed,
    client_info: Implementation,
    *,
    dispatcher: PostDispatcher | None = None,
    cache: CacheConfig | None = None,
) -> TaskClient:
    """The SDK client of one session (not entered yet), answering the server with
    `handlers`; on `dispatcher` if given (`target` is then only the server's URL);
    with the SDK's response cache if `cache` is given."""
    return TaskClient(
        target,
        mode=mode,
        prior_discover=prior,
        # Given a callback, the SDK declares elicitation {form, url}.
        elicitation_callback=handlers._on_elicit,
        # Declares roots; answered from the binding (empty by default).
        list_roots_callback=handlers._on_list_roots,
        client_info=client_info,
        message_handler=handlers._on_message,
        cache=cache,
        # Declares client tasks (2025-11-25): a task-augmented elicitation
        # is answered as a round while the server polls the task.
        client_tasks=ClientTasks(handlers._on_task_elicit),
        dispatcher=dispatcher,
    )


def _adopted(
    entered: Client,
    server: ServerBinding,
    prior: DiscoverResult | None,
    http: HttpClients,
    *,
    stateless_only: bool = False,
) -> Client:
    """A session just entered, refused when the server does not speak the protocol its
    binding is pinned to (or, `stateless_only`, 2026-07-28 whatever the binding says);
    an HTTP server's first `server/discover` answer is remembered for the binding's
    later sessions."""
    required = stateless_only or server.protocol == MRTR_PROTOCOL
    if required and entered.protocol_version != MRTR_PROTOCOL:
        raise _ProtocolMismatch(_offered(entered))
    discovered = entered.session.discover_result
    if prior is None and discovered is not None and not isinstance(server, StdioServer):
        http.remember_discovered(server.url, server.headers, discovered)
    return entered


def _mismatch_message(server: ServerBinding, offered: str) -> str:
    return (
        f"binding {server.name!r} is pinned to MCP protocol {server.protocol}, "
        f"but the server offered {offered}"
    )


def _offered(client: Client) -> str:
    """What a server that does not speak its binding's protocol offered instead."""
    session = client.session
    if session.initialize_result is not None:
        offered = (
            f"{session.initialize_result.protocol_version} "
            "(it answered the initialize handshake, not server/discover)"
        )
    elif session.discover_result is not None:
        offered = ", ".join(session.discover_result.supported_versions)
    else:
        offered = client.protocol_version
    return offered


def _resume_keys(round: InputRound) -> tuple[dict[str, str], list[str]] | None:
    """A resume token's (request key -> server key) map and roots/list server
    keys; None if it is missing, unreadable or does not cover the round."""
    try:
        token = json.loads(round.resume_token or "")
        wire_keys = {str(k): str(v) for k, v in token["wire_keys"].items()}
        roots = [str(key) for key in token["roots"]]
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return (wire_keys, roots) if set(wire_keys) == set(round.requests) else None


def _schema_problem(key: str, params: ElicitRequestParams) -> str | None:
    """Why a form request cannot become a round (its schema is not one MCP allows)."""
    if not isinstance(params, ElicitRequestFormParams):
        return None
    problem = form_schema_problem(params.requested_schema)
    return None if problem is None else f"request {key!r}: {problem}"


def _check_answers(
    active: _ActiveOperation, round: InputRound, answers: Mapping[str, ElicitationResponse]
) -> dict[str, ElicitResult] | None:
    """The resolver's answers as ElicitResults, or None (and the operation aborted)."""
    try:
        return elicit_results(round.requests, answers)
    except ValueError as exc:
        active.abort(failure=(INVALID_INPUT_RESPONSE, str(exc)))
        return None


def _completed(
    ref: OperationRef,
    reply: CallToolResult | GetPromptResult | ReadResourceResult,
    completed_elicitations: Sequence[str] = (),
) -> OperationResult:
    failed = isinstance(reply, CallToolResult) and reply.is_error
    message: str | None = None
    if isinstance(reply, CallToolResult) and reply.is_error:
        message = " ".join(block.text for block in reply.content if isinstance(block, TextContent))
    result = dict(dump_result(reply))
    if completed_elicitations:
        # Recorded next to the server's own `_meta`, under M3's prefix.
        meta = dict(result.get("_meta") or {})
        meta[META_ELICITATION_COMPLETE] = list(completed_elicitations)
        result["_meta"] = meta
    return ref.result(
        ok=not failed,
        result=result,
        failure_code=TOOL_ERROR if failed else None,
        failure_message=message,
    )


def _schema_defaults(input_schema: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments for an unscripted call: each property's `default`, where the schema has one."""
    properties = input_schema.get("properties")
    if not isinstance(properties, Mapping):
        return {}
    return {
        name: prop["default"]
        for name, prop in properties.items()
        if isinstance(prop, Mapping) and "default" in prop
    }


def _round_limit_message(active: _ActiveOperation) -> str:
    return f"the server asked for more than {active.round_limit} input rounds"


__all__ = ["CLIENT_INFO", "McpOperations", "ScriptedHarness"]
