"""The agent relay: an MCP server of M3's own between an agent CLI and the bound server.

An agent harness (Codex, Claude Code) gives its agent exactly one MCP server,
named like the execution's binding: `relay_pipe.py`, a byte pipe to a Unix
socket served here, in the worker's process. Why not the bound server itself:

- What the caller answers is what the *server* asked. An agent forwards an
  elicitation only in a shape it accepts (Codex 0.171 answers `cancel` itself to
  a form with a top-level `title`, which the MCP Python SDK always sends, and
  drops constructs it does not model); through the relay the agent is handed a
  request it accepts, while the round keeps the server's own request.
- The binding's MCP generation applies: the relay's client side is the scripted
  harness's (`McpOperations`), so a binding pinned to 2026-07-28 gets its
  multi round-trip retries (each input request relayed to the agent as an
  elicitation), -32042 and MCP tasks work as in a script, and operations are
  recorded, with their failure codes, exactly as a script's are.
- The agent is offered only the selected tools (`tools/list` is filtered; the
  agent's own configuration filters too), and a call of any other is refused.

How an elicitation travels: an operation needs input -> the scripted client
builds an `InputRound` and calls this relay's resolver -> for each request of the
round the relay sends the agent an `elicitation/create` (its `_meta[RELAY_META]`
names the round and the request) on the agent's `tools/call` in progress -> the
agent hands it to its host, the harness -> the harness calls `answer()`, whose
first call for a round hands the server's round to the execution's resolver
(a managed round, or the elicitation plan) and waits for its answers -> the
harness replies to the agent, the agent to the relay -> the relay gives the
scripted client the resolver's answers (validated against the server's schema),
not the agent's copy, and they reach the server.

An agent that answers a relayed request without handing it to its host (it
refused the request) cannot be undone here: the server gets the agent's own
answer, as it would without M3, and the operation fails
`agent_refused_elicitation` with the server's request in its result's `_meta`,
so the execution never reports a silent success.

Agent requests are served one operation at a time (the scripted client tracks
one operation in flight): an agent's parallel tool calls run in turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp import MCPError
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared._context_streams import create_context_streams
from mcp.shared.message import ServerMessageMetadata, SessionMessage
from mcp_types import (
    METHOD_NOT_FOUND,
    CallToolRequestParams,
    CallToolResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitRequestParams,
    ElicitRequestURLParams,
    ElicitResult,
    GetPromptRequestParams,
    GetPromptResult,
    JSONRPCError,
    JSONRPCRequest,
    ListPromptsResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ListToolsResult,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    ReadResourceResult,
    TextContent,
    Tool,
    jsonrpc_message_adapter,
)
from mcp_types import ErrorData as JSONRPCErrorData

from m3grpc.harness.base import (
    HarnessTask,
    InputResolver,
    InputRound,
    OperationRef,
    OperationStep,
    operation_id,
)
from m3grpc.harness.mcp_convert import DomainRequest
from m3grpc.harness.scripted import McpOperations, ScriptedHarness
from m3grpc.types import (
    ElicitationResponse,
    FormElicitationRequest,
    OperationResult,
)

logger = logging.getLogger(__name__)

# Where a relayed elicitation names its round and request: `_meta[RELAY_META]`.
RELAY_META = "m3/relay"
# An agent answered a relayed elicitation without passing it to its host.
AGENT_REFUSED_ELICITATION = "agent_refused_elicitation"
# Where such an operation's result keeps the server's request(s): `result["_meta"][...]`.
META_UNRELAYED_ELICITATION = "m3/unrelayed_elicitation"

_PIPE = Path(__file__).with_name("relay_pipe.py")
_LINE_LIMIT = 64 * 1024 * 1024  # one JSON-RPC message a line; results can be large
# A Unix socket path must fit in sun_path (108 bytes on Linux, with its NUL).
_SOCKET_PATH_LIMIT = 100

SchemaPresenter = Callable[[Mapping[str, Any]], Mapping[str, Any]]


def as_sent(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """The server's form schema, unchanged (for agents that pass any schema on)."""
    return schema


@dataclass(frozen=True)
class ForwardedElicitation:
    """An elicitation as the agent handed it to its host (the harness)."""

    mode: str  # "form" or "url"
    message: str
    meta: Mapping[str, Any] | None = None
    # The form schema as the agent passed it on (it may have dropped what it does
    # not model); only informative: the round keeps the server's own.
    requested_schema: Mapping[str, Any] | None = None


@dataclass
class _RelayedRound:
    """A round the relay is asking the agent about, request by request."""

    round: InputRound
    nonce: str = field(default_factory=lambda: uuid.uuid4().hex)
    # Requests handed to the agent and not answered yet (key -> the agent's copy).
    asked: dict[str, ElicitRequestParams] = field(default_factory=dict)
    # The execution's resolver working on the round: started by the first request
    # the agent passes on to its host.
    answers: asyncio.Task[Mapping[str, ElicitationResponse]] | None = None


class UnknownElicitation(Exception):
    """The agent passed on an elicitation the relay did not send (or no longer waits on)."""


class AgentRelay:
    """One execution's relay; `start`, then give the agent `launch_command()`, then `aclose`."""

    def __init__(
        self,
        task: HarnessTask,
        resolve: InputResolver,
        mcp: ScriptedHarness,
        *,
        directory: Path,
        agent: str,
        next_index: Callable[[], int],
        present_schema: SchemaPresenter = as_sent,
    ) -> None:
        self._task = task
        self._resolver = resolve
        self._agent = agent
        self._next_index = next_index
        self._present_schema = present_schema
        self._ops: McpOperations = mcp.operations(task, _RelayResolver(self))
        # The socket lives in the agent's private run directory (removed with it,
        # also by the next harness when a killed worker left it behind).
        self._socket = str(directory / "relay.sock")
        self._own_directory: Path | None = None
        if len(self._socket) > _SOCKET_PATH_LIMIT:
            self._own_directory = Path(tempfile.mkdtemp(prefix="m3-relay-", dir="/tmp"))
            self._socket = str(self._own_directory / "relay.sock")
        self._serving: asyncio.Task[None] | None = None
        self._turn = asyncio.Lock()
        self._asking: ServerRequestContext[Any] | None = None
        self._rounds: dict[str, _RelayedRound] = {}
        self._refused: dict[str, list[dict[str, Any]]] = {}
        self._in_flight: dict[int, OperationRef] = {}
        self.operations: list[OperationResult] = []
        # The first exception of M3's own an operation raised (not an MCP failure).
        self.unexpected: BaseException | None = None

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> tuple[str, str] | None:
        """Connect to the bound server and listen for the agent; None, or why the
        server cannot be reached (code, message)."""
        failure = await self._ops.open()
        if failure is not None:
            return failure
        listener = await anyio.create_unix_listener(self._socket)
        self._serving = asyncio.create_task(self._serve(listener), name="m3-agent-relay")
        return None

    def launch_command(self) -> tuple[str, list[str]]:
        """What the agent starts as its MCP server: (command, args)."""
        return sys.executable, ["-I", "-S", str(_PIPE), self._socket]

    async def aclose(self) -> None:
        """Stop serving the agent, end what waits, close the server connection."""
        serving, self._serving = self._serving, None
        if serving is not None:
            serving.cancel()
            with contextlib.suppress(BaseException):
                await serving
        for relayed in list(self._rounds.values()):
            if relayed.answers is not None and not relayed.answers.done():
                relayed.answers.cancel()
                with contextlib.suppress(BaseException):
                    await relayed.answers
        await self._ops.aclose()
        with contextlib.suppress(OSError):
            os.unlink(self._socket)
        if self._own_directory is not None:
            shutil.rmtree(self._own_directory, ignore_errors=True)

    # -- the harness's side: an elicitation the agent passed on ------------------------

    async def answer(
        self,
        forwarded: ForwardedElicitation,
        *,
        harness_session_id: str | None = None,
        turn_metadata: Mapping[str, Any] | None = None,
    ) -> ElicitationResponse:
        """The answer to give the agent for an elicitation it passed on.

        Raises:
            M3Error: the execution's resolver failed the round (its deadline passed,
                the execution is cancelled...): the agent should get `cancel`.
            UnknownElicitation: not a request this relay is asking about.
        """
        relayed, key = self._match(forwarded)
        relayed.asked.pop(key, None)
        if relayed.answers is None:
            round = replace(
                relayed.round,
                harness_session_id=harness_session_id,
                turn_metadata=turn_metadata,
                # An agent's process cannot be resumed by another worker, whatever
                # the server's protocol: its rounds are never handed over.
                resume_token=None,
            )
            relayed.answers = asyncio.create_task(self._resolver(round))
        # Shielded: the harness's handler may be cancelled; the round's wait is the
        # relay's to end (aclose).
        answers = await asyncio.shield(relayed.answers)
        return answers[key]

    def _match(self, forwarded: ForwardedElicitation) -> tuple[_RelayedRound, str]:
        tag = (forwarded.meta or {}).get(RELAY_META)
        if isinstance(tag, Mapping):
            relayed = self._rounds.get(str(tag.get("round")))
            key = str(tag.get("key"))
            if relayed is not None and (key in relayed.asked or key in relayed.round.requests):
                return relayed, key
            raise UnknownElicitation(f"no relayed round {tag!r} is waiting")
        # An agent that drops `_meta`: the oldest request asked with this message.
        for relayed in self._rounds.values():
            for key, asked in relayed.asked.items():
                if asked.mode == forwarded.mode and asked.message == forwarded.message:
                    return relayed, key
        raise UnknownElicitation(f"no relayed request asks {forwarded.message!r}")

    # -- the scripted client's side: a round to ask the agent about --------------------

    async def _ask(self, round: InputRound) -> Mapping[str, ElicitationResponse]:
        context = self._asking
        if context is None:
            raise RuntimeError("a round outside any agent request")
        relayed = _RelayedRound(round)
        self._rounds[relayed.nonce] = relayed
        try:
            replies: dict[str, ElicitResult | None] = {}
            for key, request in round.requests.items():
                replies[key] = await self._ask_agent(context, relayed, key, request)
                if relayed.answers is None:
                    break  # not passed on: the round is the agent's own answer
            if relayed.answers is None:
                return self._refused_round(round, replies)
            return await asyncio.shield(relayed.answers)
        finally:
            self._rounds.pop(relayed.nonce, None)

    async def _ask_agent(
        self,
        context: ServerRequestContext[Any],
        relayed: _RelayedRound,
        key: str,
        request: DomainRequest,
    ) -> ElicitResult | None:
        params = self._agent_params(relayed, key, request)
        relayed.asked[key] = params
        try:
            return await context.session.send_request(
                ElicitRequest(params=params),
                ElicitResult,
                metadata=ServerMessageMetadata(related_request_id=context.request_id),
            )
        except (MCPError, ValueError) as exc:
            logger.info("the agent answered a relayed elicitation with an error: %s", exc)
            return None
        finally:
            relayed.asked.pop(key, None)

    def _agent_params(
        self, relayed: _RelayedRound, key: str, request: DomainRequest
    ) -> ElicitRequestParams:
        meta = {**(request.meta or {}), RELAY_META: {"round": relayed.nonce, "key": key}}
        if isinstance(request, FormElicitationRequest):
            return ElicitRequestFormParams.model_validate(
                {
                    "message": request.message,
                    "requestedSchema": dict(self._present_schema(request.requested_schema)),
                    "_meta": meta,
                },
                by_name=False,
            )
        return ElicitRequestURLParams.model_validate(
            {
                "message": request.message,
                "url": request.url,
                "elicitationId": request.elicitation_id,
                "_meta": meta,
            },
            by_name=False,
        )

    def _refused_round(
        self, round: InputRound, replies: Mapping[str, ElicitResult | None]
    ) -> Mapping[str, ElicitationResponse]:
        """The agent answered the round itself: the server gets that answer (as it
        would without M3), and the operation is marked failed."""
        operation = round.operation.logical_operation_id
        self._refused.setdefault(operation, []).extend(
            {"request_key": key, **request.model_dump(mode="json", exclude_none=True)}
            for key, request in round.requests.items()
        )
        answers: dict[str, ElicitationResponse] = {}
        for key in round.requests:
            reply = replies.get(key)
            if reply is None or reply.action != "accept":
                answers[key] = ElicitationResponse(
                    action=reply.action if reply is not None else "cancel"
                )
            else:
                answers[key] = ElicitationResponse(action="accept", content=reply.content)
        return answers

    def _amend(self, result: OperationResult) -> OperationResult:
        refused = self._refused.pop(result.logical_operation_id, None)
        if refused is None:
            return result
        record = dict(result.result or {})
        record["_meta"] = {**dict(record.get("_meta") or {}), META_UNRELAYED_ELICITATION: refused}
        keys = ", ".join(repr(entry["request_key"]) for entry in refused)
        return result.model_copy(
            update={
                "ok": False,
                "result": record,
                "failure_code": AGENT_REFUSED_ELICITATION,
                "failure_message": (
                    f"{self._agent} answered the server's elicitation {keys} itself instead of "
                    "passing it on, so it never reached the caller "
                    f"({json.dumps(refused[0].get('message'))})"
                ),
            }
        )

    # -- operations --------------------------------------------------------------------

    async def _operate(
        self, context: ServerRequestContext[Any], step: OperationStep
    ) -> OperationResult:
        async with self._turn:
            index = self._next_index()
            self._in_flight[index] = OperationRef(
                logical_operation_id=operation_id(index),
                server=self._task.server.name,
                operation_kind=step.kind,
                operation_name=step.name,
                arguments=dict(step.arguments),
            )
            self._asking = context
            try:
                result, _stop = await self._ops.run(index, step, amend=self._amend)
            except Exception as exc:
                # A fault of M3's own (a resolver bug): the harness raises it, as the
                # scripted harness does, rather than let the operation go unrecorded.
                if self.unexpected is None:
                    self.unexpected = exc
                raise
            finally:
                self._asking = None
            # Only an operation that returned leaves the in-flight set: one cut
            # short (the run ended, the agent cancelled the call) stays there.
            del self._in_flight[index]
        self.operations.append(result)
        return result

    async def server_tools(self) -> list[Tool]:
        """The bound server's tools (all of them, selected or not)."""
        return await self._ops.tools()

    @property
    def asking_meta(self) -> Mapping[str, Any] | None:
        """The `_meta` of the agent's request in progress (Claude Code names its
        tool_use there), or None."""
        context = self._asking
        meta = (context.params or {}).get("_meta") if context is not None else None
        return meta if isinstance(meta, Mapping) else None

    @property
    def unfinished(self) -> list[OperationRef]:
        """Operations the agent started that did not return (cut short by the run's end)."""
        return list(self._in_flight.values())

    # -- serving the agent -------------------------------------------------------------

    def _server(self) -> Server[Any]:
        ops = self._ops
        info = ops.server_info
        capabilities = ops.capabilities
        handlers: dict[str, Any] = {
            "on_list_tools": self._list_tools,
            "on_call_tool": self._call_tool,
        }
        if capabilities.resources is not None:
            handlers.update(
                on_list_resources=self._list_resources,
                on_list_resource_templates=self._list_resource_templates,
                on_read_resource=self._read_resource,
            )
        if capabilities.prompts is not None:
            handlers.update(on_list_prompts=self._list_prompts, on_get_prompt=self._get_prompt)
        return Server(
            info.name if info is not None else self._task.server.name,
            version=info.version if info is not None else "",
            instructions=ops.instructions,
            **handlers,
        )

    async def _list_tools(
        self, context: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        tools = await self._ops.tools()
        if self._task.tools:
            selected = set(self._task.selected_tools())
            tools = [tool for tool in tools if tool.name in selected]
        return ListToolsResult(tools=tools)

    async def _call_tool(
        self, context: ServerRequestContext[Any], params: CallToolRequestParams
    ) -> CallToolResult:
        step = OperationStep("tool", params.name, dict(params.arguments or {}))
        result: OperationResult = await self._operate(context, step)
        return _tool_reply(result)

    async def _list_resources(
        self, context: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListResourcesResult:
        raw = await self._ops.call("resources/list", _page(params))
        return ListResourcesResult.model_validate(raw, by_name=False)

    async def _list_resource_templates(
        self, context: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListResourceTemplatesResult:
        raw = await self._ops.call("resources/templates/list", _page(params))
        return ListResourceTemplatesResult.model_validate(raw, by_name=False)

    async def _read_resource(
        self, context: ServerRequestContext[Any], params: ReadResourceRequestParams
    ) -> ReadResourceResult:
        result: OperationResult = await self._operate(
            context, OperationStep("resource", str(params.uri))
        )
        return ReadResourceResult.model_validate(_reply_or_raise(result), by_name=False)

    async def _list_prompts(
        self, context: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListPromptsResult:
        raw = await self._ops.call("prompts/list", _page(params))
        return ListPromptsResult.model_validate(raw, by_name=False)

    async def _get_prompt(
        self, context: ServerRequestContext[Any], params: GetPromptRequestParams
    ) -> GetPromptResult:
        step = OperationStep("prompt", params.name, dict(params.arguments or {}))
        result: OperationResult = await self._operate(context, step)
        return GetPromptResult.model_validate(_reply_or_raise(result), by_name=False)

    async def _serve(self, listener: anyio.abc.SocketListener) -> None:
        server = self._server()
        options = server.create_initialization_options()
        async with listener, anyio.create_task_group() as group:

            async def session(stream: anyio.abc.SocketStream) -> None:
                async with stream:
                    await _serve_stream(server, options, stream)

            await listener.serve(session, task_group=group)


class _RelayResolver:
    """The resolver the relay's scripted client sees: rounds go to the agent, and
    the client's progress hooks go to the execution's resolver unchanged."""

    def __init__(self, relay: AgentRelay) -> None:
        self._relay = relay

    async def __call__(self, round: InputRound) -> Mapping[str, ElicitationResponse]:
        return await self._relay._ask(round)

    def __getattr__(self, name: str) -> Callable[..., Awaitable[None]]:
        # operation_finished, connection_closing, input_requested, input_delivered:
        # the execution's resolver's own, where it has them.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._relay._resolver, name)  # type: ignore[no-any-return]


async def _serve_stream(server: Server[Any], options: Any, stream: anyio.abc.SocketStream) -> None:
    """Serve one agent connection: newline-delimited JSON-RPC, as over stdio.

    The relay serves the handshake era only: a server-initiated elicitation needs
    the back-channel that 2026-07-28's `server/discover` sessions do not have, so
    `server/discover` is answered "method not found" and the agent falls back to
    `initialize` (as MCP clients do)."""
    read_writer, read_stream = create_context_streams[SessionMessage | Exception](0)
    write_stream, write_reader = create_context_streams[SessionMessage](0)
    sending = anyio.Lock()

    async def send_line(document: str) -> None:
        async with sending:
            await stream.send((document + "\n").encode())

    async def read() -> None:
        lines = BufferedByteReceiveStream(stream)
        async with read_writer:
            while True:
                try:
                    line = await lines.receive_until(b"\n", _LINE_LIMIT)
                except (anyio.EndOfStream, anyio.IncompleteRead, anyio.ClosedResourceError):
                    return
                if not line.strip():
                    continue
                try:
                    message = jsonrpc_message_adapter.validate_json(line, by_name=False)
                except Exception as exc:
                    await read_writer.send(exc)
                    continue
                if isinstance(message, JSONRPCRequest) and message.method == "server/discover":
                    refusal = JSONRPCError(
                        jsonrpc="2.0",
                        id=message.id,
                        error=JSONRPCErrorData(
                            code=METHOD_NOT_FOUND, message="this relay speaks the handshake era"
                        ),
                    )
                    await send_line(refusal.model_dump_json(by_alias=True, exclude_none=True))
                    continue
                await read_writer.send(SessionMessage(message))

    async def write() -> None:
        async with write_reader:
            async for outgoing in write_reader:
                await send_line(outgoing.message.model_dump_json(by_alias=True, exclude_unset=True))

    async with anyio.create_task_group() as group:
        group.start_soon(read)
        group.start_soon(write)
        try:
            await server.run(read_stream, write_stream, options)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # the agent went away
        finally:
            group.cancel_scope.cancel()


def _page(params: PaginatedRequestParams | None) -> dict[str, Any]:
    cursor = params.cursor if params is not None else None
    return {} if cursor is None else {"cursor": cursor}


def _tool_reply(result: OperationResult) -> CallToolResult:
    """What the agent gets for a tool call: the server's result, or M3's failure as
    a tool error (the agent sees why, the model can go on)."""
    if result.result is not None and "content" in result.result:
        reply = CallToolResult.model_validate(result.result, by_name=False)
        if not result.ok:
            reply = reply.model_copy(update={"is_error": True})
        return reply
    message = result.failure_message or result.failure_code or "the operation failed"
    return CallToolResult(
        content=[TextContent(type="text", text=f"{result.failure_code}: {message}")],
        is_error=True,
    )


def _reply_or_raise(result: OperationResult) -> Mapping[str, Any]:
    """A prompt's or resource's result for the agent; a failure as a JSON-RPC error."""
    if result.ok and result.result is not None:
        return result.result
    raise MCPError(
        code=-32603,
        message=f"{result.failure_code}: {result.failure_message or 'the operation failed'}",
    )


__all__ = [
    "AGENT_REFUSED_ELICITATION",
    "META_UNRELAYED_ELICITATION",
    "RELAY_META",
    "AgentRelay",
    "ForwardedElicitation",
    "UnknownElicitation",
    "as_sent",
]
