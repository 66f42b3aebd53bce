"""MCP tasks (protocol 2025-11-25) on the client side, which the MCP SDK leaves out.

The SDK (2.3.0) defines the task types but never declares the `tasks` client
capability, never dispatches a `tasks/*` request the server sends, and validates
a task-augmented `tools/call` reply as a `CallToolResult`. This module adds what
M3 needs:

- `TaskClient`, an SDK `Client` whose session (`TaskAwareSession`) declares
  `tasks` on a 2025-11-25 connection (`list`, `cancel` and task-augmented
  `elicitation/create`), and sends requests whose replies the SDK would refuse
  (`send_raw`).
- `ClientTasks`: the tasks the *client* runs for the server (a task-augmented
  `elicitation/create`). The elicitation is answered in the background, and the
  server's `tasks/get`, `tasks/result`, `tasks/list` and `tasks/cancel` are
  answered from here.

The requestor side of a task-augmented `tools/call` (create, poll, fetch the
result, cancel) is driven by the scripted harness with `send_raw`.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import anyio
from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for
from mcp import Client, MCPError
from mcp.client.session import ClientRequestContext, ClientSession
from mcp.shared.dispatcher import DispatchContext, Dispatcher
from mcp.shared.transport_context import TransportContext
from mcp_types import (
    INVALID_PARAMS,
    ClientCapabilities,
    ClientTasksCapability,
    ClientTasksRequestsCapability,
    ElicitRequestFormParams,
    ElicitRequestParams,
    ElicitRequestURLParams,
    ElicitResult,
    ErrorData,
    Task,
    TasksCancelCapability,
    TasksCreateElicitationCapability,
    TasksElicitationCapability,
    TasksListCapability,
    TaskStatus,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from referencing import Registry

# The `_meta` key that ties a message to a task (2025-11-25).
RELATED_TASK_META = "io.modelcontextprotocol/related-task"
TASKS_PROTOCOL = "2025-11-25"
TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled"})
# How often the server is told to poll a client task, in milliseconds.
CLIENT_TASK_POLL_MS = 500
# Distinct tool output schemas whose compiled validators the process keeps.
OUTPUT_SCHEMA_CACHE_SIZE = 256

ElicitHandler = Callable[
    [ClientRequestContext, ElicitRequestParams, str], Awaitable[ElicitResult | ErrorData]
]


def related_task_id(meta: Mapping[str, Any] | None) -> str | None:
    """The task ID of `_meta["io.modelcontextprotocol/related-task"]`, if any."""
    related = (meta or {}).get(RELATED_TASK_META)
    if isinstance(related, Mapping) and isinstance(related.get("taskId"), str):
        task_id: str = related["taskId"]
        return task_id
    return None


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


@dataclass
class _ClientTask:
    task_id: str
    ttl: int | None
    created_at: str = field(default_factory=_now)
    status: TaskStatus = "working"
    status_message: str | None = None
    last_updated_at: str = field(default_factory=_now)
    outcome: ElicitResult | ErrorData | None = None
    done: anyio.Event = field(default_factory=anyio.Event)

    def update(self, status: TaskStatus, message: str | None = None) -> None:
        self.status, self.status_message, self.last_updated_at = status, message, _now()

    def wire(self) -> dict[str, Any]:
        task = Task(
            task_id=self.task_id,
            status=self.status,
            status_message=self.status_message,
            created_at=self.created_at,
            last_updated_at=self.last_updated_at,
            ttl=self.ttl,
            poll_interval=CLIENT_TASK_POLL_MS,
        )
        dumped: dict[str, Any] = task.model_dump(by_alias=True, mode="json", exclude_none=True)
        dumped["ttl"] = self.ttl  # required on the wire, null for unlimited
        return dumped


class ClientTasks:
    """The tasks this client runs for the server: task-augmented elicitations.

    `elicit(context, params, task_id)` answers one elicitation (as the legacy
    callback does); it runs in the session's task group while the server polls.
    """

    def __init__(self, elicit: ElicitHandler) -> None:
        self._elicit = elicit
        self._tasks: dict[str, _ClientTask] = {}

    def create(
        self, session: ClientSession, context: ClientRequestContext, params: ElicitRequestParams
    ) -> dict[str, Any]:
        """Start the elicitation as a task; the `CreateTaskResult` to send back."""
        ttl = params.task.ttl if params.task is not None else None
        task = _ClientTask(task_id=f"m3-task-{uuid.uuid4().hex}", ttl=ttl)
        self._tasks[task.task_id] = task
        spawn = getattr(session, "_task_group", None)
        assert spawn is not None, "the session is entered"
        spawn.start_soon(self._run, task, context, params)
        return {"task": task.wire()}

    async def _run(
        self, task: _ClientTask, context: ClientRequestContext, params: ElicitRequestParams
    ) -> None:
        task.update("input_required", "waiting for the user's answer")
        try:
            outcome = await self._elicit(context, params, task.task_id)
        finally:
            task.done.set()  # also when the session closes mid-wait
        if task.status == "cancelled":
            return  # the server no longer wants the answer
        task.outcome = outcome
        if isinstance(outcome, ErrorData):
            task.update("failed", outcome.message)
        else:
            task.update("completed")

    def _task(self, params: Mapping[str, Any] | None) -> _ClientTask:
        task_id = (params or {}).get("taskId")
        task = self._tasks.get(task_id) if isinstance(task_id, str) else None
        if task is None:
            raise MCPError(code=INVALID_PARAMS, message=f"unknown task {task_id!r}")
        return task

    async def answer(self, method: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
        """Answer a `tasks/*` request of the server."""
        if method == "tasks/list":
            return {"tasks": [task.wire() for task in self._tasks.values()]}
        task = self._task(params)
        if method == "tasks/get":
            return task.wire()
        if method == "tasks/cancel":
            if task.status in TERMINAL_STATUSES:
                raise MCPError(code=INVALID_PARAMS, message=f"task {task.task_id} already ended")
            # The round is not withdrawn: it stays open until answered (the answer
            # then goes nowhere) or the execution ends. Cutting a resolver's wait
            # short would leave the runtime's bookkeeping of the round behind.
            task.update("cancelled", "cancelled by the requestor")
            return task.wire()
        # tasks/result: blocks until the task ends (the user may take long).
        if task.status != "cancelled":
            await task.done.wait()
        outcome = task.outcome if task.status != "cancelled" else None
        if isinstance(outcome, ElicitResult):
            result: dict[str, Any] = outcome.model_dump(
                by_alias=True, mode="json", exclude_none=True
            )
            related = {RELATED_TASK_META: {"taskId": task.task_id}}
            result["_meta"] = {**result.get("_meta", {}), **related}
            return result
        if isinstance(outcome, ErrorData):
            raise MCPError.from_error_data(outcome)
        raise MCPError(code=INVALID_PARAMS, message=f"task {task.task_id} was cancelled")


class TaskAwareSession(ClientSession):
    """A `ClientSession` that declares and serves client tasks (2025-11-25)."""

    def __init__(self, *args: Any, client_tasks: ClientTasks | None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._client_tasks = client_tasks
        self._dispatcher = _CompleteByDefault(self._dispatcher, self)

    def _build_capabilities(self, version: str) -> ClientCapabilities:
        capabilities = super()._build_capabilities(version)
        if self._client_tasks is None or version != TASKS_PROTOCOL:
            return capabilities  # tasks left the core protocol after 2025-11-25
        tasks = ClientTasksCapability(
            list=TasksListCapability(),
            cancel=TasksCancelCapability(),
            requests=ClientTasksRequestsCapability(
                elicitation=TasksElicitationCapability(create=TasksCreateElicitationCapability())
            ),
        )
        return capabilities.model_copy(update={"tasks": tasks})

    async def _on_request(
        self, dctx: DispatchContext[TransportContext], method: str, params: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        tasks = self._client_tasks
        if tasks is not None and method.startswith("tasks/"):
            return await tasks.answer(method, params)
        if tasks is not None and method == "elicitation/create" and (params or {}).get("task"):
            parsed: ElicitRequestParams
            if (params or {}).get("mode") == "url":
                parsed = ElicitRequestURLParams.model_validate(params, by_name=False)
            else:
                parsed = ElicitRequestFormParams.model_validate(params, by_name=False)
            assert dctx.request_id is not None
            context = ClientRequestContext(
                session=self, request_id=dctx.request_id, meta=parsed.meta
            )
            return tasks.create(self, context, parsed)
        return await super()._on_request(dctx, method, params)

    def _output_schema_validator(self, name: str, output_schema: dict[str, Any]) -> Any:
        # The SDK compiles (and checks against its metaschema) a tool's output
        # schema once per session, which with one session per execution was a
        # few percent of a round's CPU; the compiled validator depends only on
        # the schema's value, so the process's sessions share it.
        try:
            return _compiled_output_schema(json.dumps(output_schema, sort_keys=True))
        except SchemaError as e:
            raise RuntimeError(f"Invalid schema for tool {name}: {e}") from e

    async def send_raw(self, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """Send a request and return its raw result, unvalidated: a task-augmented
        `tools/call` answers with a `CreateTaskResult`, and `tasks/*` are not in the
        SDK's method tables. The caller validates the reply."""
        data: dict[str, Any] = {"method": method, "params": dict(params)}
        opts: dict[str, Any] = {}
        self._stamp(data, opts)  # type: ignore[arg-type]
        raw: dict[str, Any] = await self._dispatcher.send_raw_request(
            method,
            data.get("params"),
            opts,  # type: ignore[arg-type]
        )
        return raw


class _CompleteByDefault:
    """The session's dispatcher, reading a 2026-07-28 result without `resultType` as a
    complete one.

    The spec: a client MUST treat an absent `resultType` as "complete" (the
    conformance suite's `sep-2322-client-request-state` checks it); the SDK's
    check of the 2026-07-28 result schema, which requires the field, would
    refuse such a result (the operation failed `invalid_server_result`).
    """

    def __init__(self, inner: Any, session: ClientSession) -> None:
        self._inner = inner
        self._session = session

    async def send_raw_request(self, method: str, params: Any, opts: Any = None) -> Any:
        raw = await self._inner.send_raw_request(method, params, opts)
        if (
            isinstance(raw, dict)
            and "resultType" not in raw
            and self._session._negotiated_version in MODERN_PROTOCOL_VERSIONS
        ):
            raw = {**raw, "resultType": "complete"}
        return raw

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@functools.lru_cache(maxsize=OUTPUT_SCHEMA_CACHE_SIZE)
def _compiled_output_schema(schema_json: str) -> Any:
    """The SDK's compiled output-schema validator (`ClientSession._output_schema_validator`:
    checked against its metaschema, `$ref`s resolved within the document only), built
    once per schema value. An invalid schema raises `SchemaError` on every call (an
    exception is never cached)."""
    schema = json.loads(schema_json)
    validator_cls = validator_for(schema)
    validator_cls.check_schema(schema)
    return validator_cls(schema, registry=Registry())


@dataclass(kw_only=True)
class TaskClient(Client):
    """An SDK `Client` whose session is a `TaskAwareSession`; on `dispatcher` if one
    is given (instead of one over the transport `server` names)."""

    client_tasks: ClientTasks | None = None
    dispatcher: Dispatcher[Any] | None = None

    async def _build_session(self, exit_stack: AsyncExitStack) -> ClientSession:
        dispatcher = self.dispatcher
        if dispatcher is None:
            dispatcher = await self._connect(exit_stack, self.mode, self.raise_exceptions)
        return TaskAwareSession(
            dispatcher=dispatcher,
            read_timeout_seconds=self.read_timeout_seconds,
            sampling_callback=self.sampling_callback,
            sampling_capabilities=self.sampling_capabilities,
            list_roots_callback=self.list_roots_callback,
            logging_callback=self.logging_callback,
            log_level=self.log_level,
            message_handler=self.message_handler,
            client_info=self.client_info,
            elicitation_callback=self.elicitation_callback,
            client_tasks=self.client_tasks,
        )
