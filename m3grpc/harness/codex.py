"""The `codex` harness: OpenAI's Codex CLI (`codex app-server`) works against the bound server.

Per execution it creates a temporary `CODEX_HOME` with a generated
`config.toml` (the model, the model provider, the execution's server as the
only MCP server, and settings that keep Codex headless and offline-safe),
starts `codex app-server` (JSON-RPC, one JSON object a line over stdio), and
runs `initialize` -> `thread/start` -> (the MCP server is ready) ->
`turn/start` with the prompt, following notifications to `turn/completed`.

Codex's MCP server is M3's agent relay (`m3grpc.harness.relay`), named like the
binding: the relay connects to the bound server as the scripted harness does
(the binding's protocol generation applies), offers Codex only the selected
tools (so does `enabled_tools` in the config), and records the operations.
Codex's server-to-client requests are answered here:

- MCP tool-call approvals (`mcpServer/elicitation/request` with
  `_meta.codex_approval_kind = "mcp_tool_call"`): accepted for the task's
  selected tools of the bound server; with no selection at all, the
  permission policy answers (a denied call is a failed operation
  `permission_denied`); a call of an unselected tool (which Codex is not
  offered) is declined and recorded `tool_not_selected`. Every MCP tool is
  set to prompt, so no call skips this check.
- The bound server's elicitations reach Codex from the relay in a shape Codex
  0.171 accepts (it refuses a form schema with a top-level `title` or
  `description`, which the MCP Python SDK's `ctx.elicit` sends), and come back
  as `mcpServer/elicitation/request`; the relay hands the server's own request
  to the resolver (managed rounds, or the elicitation plan with
  human_input="fail") and the answer to the server.
- Native prompts (command execution, file changes, permissions, user input)
  are answered by the task's `permission_policy` ("deny" by default).

Lifecycle: the process runs in its own process group (its MCP server
children with it) and is stopped, and the temporary home removed, when `run`
returns or raises, cancellation included. Codex exits when its stdin closes
(the worker died), and on Linux it also gets SIGKILL when the thread that
started it dies (`setpriv --pdeathsig`), so a killed worker leaves no agent
behind; a stale home of a dead worker is removed by the next harness created
in that temp directory. The relay (and a stdio server it started) lives in the
worker and stops with the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from mcp_types import Implementation

from m3grpc.harness.agent_process import (
    make_home,
    parent_death_prefix,
    read_json_lines,
    remove_stale_homes,
    signal_group,
)
from m3grpc.harness.agent_run import (
    AGENT_FAILED,
    AGENT_TURN_FAILED,
    AGENT_TURN_INTERRUPTED,
    AGENT_UNAVAILABLE,
    AgentRun,
    missing_executable,
)
from m3grpc.harness.base import (
    SERVER_UNAVAILABLE,
    HarnessOutcome,
    HarnessTask,
    InputResolver,
)
from m3grpc.harness.relay import ForwardedElicitation
from m3grpc.harness.scripted import ScriptedHarness
from m3grpc.types import AgentReport

logger = logging.getLogger(__name__)

CODEX_VERSION = "0.171.0"
HOME_PREFIX = "m3-codex-"

# What the bound server sees as its client: the relay, on Codex's behalf.
RELAY_CLIENT_INFO = Implementation(
    name="m3-agent-relay", title="M3 relay for Codex", version=CODEX_VERSION
)
# The top-level keys of a form schema Codex 0.171 forwards: with any other (a `title`
# or `description`, as pydantic models render them) it answers `cancel` itself.
_CODEX_FORM_KEYS = frozenset({"$schema", "type", "properties", "required"})

_REPO_ROOT = Path(__file__).resolve().parents[2]
_JSONRPC_LINE_LIMIT = 64 * 1024 * 1024  # one JSON-RPC message a line; results can be large
_STOP_GRACE_SECONDS = 5.0
_INTERRUPT_WAIT_SECONDS = 10.0
_METHOD_NOT_FOUND = -32601


@dataclass(frozen=True)
class CodexSettings:
    """Where Codex is and which model provider it talks to.

    - `binary`: the `codex` executable; default `$M3_CODEX_BIN`, else the one
      `scripts/setup-codex.sh` installed in this checkout, else `codex` on PATH.
    - `base_url`: a Responses API base URL (`http://host:port/v1`) for a custom
      provider; None uses Codex's built-in OpenAI provider.
    - `env_key`: the environment variable holding the API key; its value (from
      `env`, else this process's environment) is passed to Codex, which sends
      it as a bearer token. Nothing else of this process's environment is.
    - `auth_home`: a signed-in `CODEX_HOME` whose `auth.json` is copied into
      each execution's temporary home.
    """

    binary: str | None = None
    base_url: str | None = None
    env_key: str = "OPENAI_API_KEY"
    provider_id: str = "m3"
    auth_home: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    startup_timeout_seconds: float = 60.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> CodexSettings:
        """Settings from M3_CODEX_BIN, M3_CODEX_BASE_URL, M3_CODEX_ENV_KEY, M3_CODEX_AUTH_HOME."""
        env = os.environ if environ is None else environ
        auth_home = env.get("M3_CODEX_AUTH_HOME")
        return cls(
            binary=env.get("M3_CODEX_BIN") or None,
            base_url=env.get("M3_CODEX_BASE_URL") or None,
            env_key=env.get("M3_CODEX_ENV_KEY") or "OPENAI_API_KEY",
            auth_home=Path(auth_home) if auth_home else None,
        )

    def missing_binary(self) -> str | None:
        """Why Codex cannot be started (its binary is not there), or None."""
        return missing_executable(
            self.resolved_binary(),
            "the Codex CLI",
            "run `bash scripts/setup-codex.sh`, or set M3_CODEX_BIN (the service: [codex] binary)",
        )

    def resolved_binary(self) -> str:
        if self.binary:
            return self.binary
        installed = sorted(
            (_REPO_ROOT / "tools" / "codex" / "node_modules" / "@openai").glob(
                "codex-*/vendor/*/bin/codex"
            )
        )
        if installed:
            return str(installed[0])
        return shutil.which("codex") or "codex"


class CodexHarness:
    """Runs an AgentSpec's prompt with Codex against the execution's bound MCP server."""

    name = "codex"

    def __init__(self, settings: CodexSettings | None = None) -> None:
        self.settings = settings or CodexSettings.from_env()
        # The relay's MCP client (HTTP connections, shared 2026-07-28 sessions).
        self._mcp = ScriptedHarness(client_info=RELAY_CLIENT_INFO)
        remove_stale_homes(HOME_PREFIX)

    async def run(self, task: HarnessTask, resolve_input: InputResolver) -> HarnessOutcome:
        home = make_home(HOME_PREFIX)
        try:
            return await _CodexRun(task, resolve_input, self.settings, home, self._mcp).execute()
        finally:
            shutil.rmtree(home, ignore_errors=True)

    async def aclose(self) -> None:
        """Close the relay's HTTP connections (the runtime calls it when it stops)."""
        await self._mcp.aclose()


def codex_schema(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """A form schema as the relay hands it to Codex: only the top-level keys Codex
    forwards (the round keeps the server's schema whole)."""
    return {key: value for key, value in schema.items() if key in _CODEX_FORM_KEYS}


# -- config ------------------------------------------------------------------------------


def _toml(value: Any) -> str:
    """A TOML value: JSON strings, arrays and inline tables are valid TOML for these types."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{_toml_string(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    return "[" + ", ".join(_toml(v) for v in value) + "]"


def _toml_string(value: str) -> str:
    """A TOML basic string. JSON's escapes are TOML's, but for characters beyond
    the BMP (JSON's surrogate pairs are not TOML scalars): those stay as they are,
    and DEL, which TOML forbids raw, is escaped."""
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def codex_config(
    task: HarnessTask, settings: CodexSettings, model: str | None, mcp_server: tuple[str, list[str]]
) -> str:
    """The `config.toml` for one execution; `mcp_server` is the command (and args)
    Codex starts as the bound server: the relay's pipe."""
    lines: list[str] = []
    if model:
        lines.append(f"model = {_toml(model)}")
    if settings.base_url:
        lines.append(f"model_provider = {_toml(settings.provider_id)}")
    lines += [
        # on-request: the only policy under which Codex forwards MCP elicitations
        # (with "never" it declines them itself).
        'approval_policy = "on-request"',
        'sandbox_mode = "read-only"',
        "[analytics]",
        "enabled = false",
        # Without these Codex reaches for the internet at start.
        "[features]",
        "plugins = false",
        "apps = false",
    ]
    if settings.base_url:
        lines += [
            f"[model_providers.{settings.provider_id}]",
            'name = "m3 configured provider"',
            f"base_url = {_toml(settings.base_url)}",
            'wire_api = "responses"',
            f"env_key = {_toml(settings.env_key)}",
        ]
    command, args = mcp_server
    lines += [
        f"[mcp_servers.{_toml(task.server.name)}]",
        f"command = {_toml(command)}",
        f"args = {_toml(args)}",
        # Without `required` a server that is slow to start is silently left out.
        "required = true",
        f"startup_timeout_sec = {int(settings.startup_timeout_seconds)}",
        # Every call asks, so M3 checks each one against the tool selection.
        'default_tools_approval_mode = "prompt"',
    ]
    if task.tools:
        # The model is offered exactly the selected tools (none, if the selection
        # names none of this server's); with no selection, every tool.
        lines.append(f"enabled_tools = {_toml(task.selected_tools())}")
    return "\n".join(lines) + "\n"


# -- process -----------------------------------------------------------------------------


class _RpcError(Exception):
    def __init__(self, method: str, error: Mapping[str, Any]) -> None:
        super().__init__(f"{method}: {error.get('message', error)}")
        self.error = error


@dataclass
class _Call:
    """One MCP tool call of the agent (an `mcpToolCall` item)."""

    server: str
    tool: str
    item_id: str


class _CodexRun:
    def __init__(
        self,
        task: HarnessTask,
        resolve: InputResolver,
        settings: CodexSettings,
        home: Path,
        mcp: ScriptedHarness,
    ) -> None:
        self._task = task
        self._settings = settings
        self._home = home
        self._model = task.models[0] if task.models else None
        self._run = AgentRun(
            task, resolve, mcp, agent="codex", directory=home, present_schema=codex_schema
        )
        self._relay = self._run.relay
        self._proc: asyncio.subprocess.Process | None = None
        self._stderr: BinaryIO | None = None
        self._next_id = 0
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._handlers: set[asyncio.Task[None]] = set()
        self._calls: dict[str, _Call] = {}
        self._call_order: list[str] = []
        self._thread_id: str | None = None
        self._turn_id: str | None = None
        self._turn_status: str | None = None
        self._turn_error: str | None = None
        self._final_message: str | None = None
        self._usage: dict[str, int] | None = None
        self._mcp_ready = asyncio.Event()
        self._mcp_error: str | None = None
        self._turn_done = asyncio.Event()
        self._closed = asyncio.Event()
        self._unexpected: BaseException | None = None

    # -- the run ---------------------------------------------------------------------------

    async def execute(self) -> HarnessOutcome:
        return await self._run.drive(
            missing=self._settings.missing_binary(),
            agent=self._run_codex,
            outcome=lambda failure: self._outcome(failure=failure),
        )

    async def _run_codex(self) -> tuple[str, str] | None:
        (self._home / "config.toml").write_text(
            codex_config(self._task, self._settings, self._model, self._relay.launch_command()),
            encoding="utf-8",
        )
        if self._settings.auth_home is not None:
            auth = self._settings.auth_home / "auth.json"
            if auth.is_file():
                shutil.copy2(auth, self._home / "auth.json")
        try:
            await self._start()
        except OSError as exc:
            return (AGENT_UNAVAILABLE, f"cannot start codex: {exc}")
        reader = asyncio.create_task(self._read(), name="codex-reader")
        try:
            failure = await self._converse()
            if self._unexpected is not None:
                raise self._unexpected
            return failure
        finally:
            # Cancellation included: interrupt the turn, stop the process, drop the tasks.
            await self._shutdown(reader)

    async def _converse(self) -> tuple[str, str] | None:
        startup = self._settings.startup_timeout_seconds + 30
        try:
            await self._request(
                "initialize",
                {"clientInfo": {"name": "m3grpc", "title": "M3", "version": "0.1.0"}},
                timeout=startup,
            )
            await self._notify("initialized")
            started = await self._request(
                "thread/start",
                {
                    "cwd": str(self._home),
                    "approvalPolicy": "on-request",
                    "sandbox": "read-only",
                    # No session rollout files: nothing of the thread is resumable anyway.
                    "ephemeral": True,
                },
                timeout=startup,
            )
            self._thread_id = str(started["thread"]["id"])
            await self._until(self._mcp_ready, timeout=startup)
            if self._mcp_error is not None:
                return (SERVER_UNAVAILABLE, self._mcp_error)
            turn = await self._request(
                "turn/start",
                {
                    "threadId": self._thread_id,
                    "input": [{"type": "text", "text": self._task.prompt}],
                },
                timeout=startup,
            )
            self._turn_id = str(turn["turn"]["id"])
        except (_RpcError, TimeoutError, ConnectionError, KeyError, TypeError) as exc:
            if self._run.stop_reason is not None:
                return self._run.stop_reason
            logger.warning(
                "codex did not start execution %s: %s", self._task.execution_id, self._stderr_tail()
            )
            return (AGENT_UNAVAILABLE, f"codex app-server: {exc!r}: {self._stderr_tail()}")
        # Nothing here times out: the turn waits on humans (rounds have their own deadlines).
        await self._first(self._turn_done, self._run.stopped, self._closed)
        if self._run.stop_reason is not None:
            await self._interrupt()
            return self._run.stop_reason
        if not self._turn_done.is_set():
            return (
                AGENT_FAILED,
                f"codex app-server exited before the turn completed: {self._stderr_tail()}",
            )
        if self._turn_status == "failed":
            return (AGENT_TURN_FAILED, self._turn_error or "the agent's turn failed")
        if self._turn_status == "interrupted":
            return (AGENT_TURN_INTERRUPTED, "the agent's turn was interrupted")
        return None

    def _outcome(self, *, failure: tuple[str, str] | None) -> HarnessOutcome:
        report = AgentReport(
            harness="codex",
            model=self._model,
            session_id=self._thread_id,
            turn_id=self._turn_id,
            turn_status=self._turn_status,
            final_message=self._final_message,
            token_usage=self._usage,
            native_prompts=tuple(self._run.prompts),
        )
        return HarnessOutcome(self._run.operations(failure), agent=report, failure=failure)

    async def _start(self) -> None:
        env = {
            "CODEX_HOME": str(self._home),
            "HOME": str(self._home),
            "PATH": os.environ.get("PATH", os.defpath),
        }
        for name in ("LANG", "LC_ALL", "TMPDIR", "SSL_CERT_FILE"):
            if name in os.environ:
                env[name] = os.environ[name]
        key = self._settings.env.get(self._settings.env_key, os.environ.get(self._settings.env_key))
        if key is not None:
            env[self._settings.env_key] = key
        env.update({k: v for k, v in self._settings.env.items() if k != self._settings.env_key})
        self._stderr = (self._home / "codex-stderr.log").open("wb")
        self._proc = await asyncio.create_subprocess_exec(
            *parent_death_prefix(),
            self._settings.resolved_binary(),
            "app-server",
            "--strict-config",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            # Kept in the home (removed with it) and quoted when Codex fails to start.
            stderr=self._stderr,
            cwd=str(self._home),
            env=env,
            limit=_JSONRPC_LINE_LIMIT,
            # Own process group: stopping it stops Codex's MCP server children too.
            start_new_session=True,
        )

    def _stderr_tail(self, limit: int = 2000) -> str:
        """The exit status and the end of Codex's stderr, for failure messages."""
        status = self._proc.returncode if self._proc is not None else None
        try:
            text = (self._home / "codex-stderr.log").read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""
        return f"(exit status {status}) {text[-limit:].strip()}".strip()

    async def _shutdown(self, reader: asyncio.Task[None]) -> None:
        proc = self._proc
        try:
            if proc is not None and proc.returncode is None:
                if self._turn_id is not None and not self._turn_done.is_set():
                    with contextlib.suppress(Exception, asyncio.CancelledError):
                        await asyncio.wait_for(self._interrupt(), _INTERRUPT_WAIT_SECONDS)
                if proc.stdin is not None:
                    with contextlib.suppress(Exception):
                        proc.stdin.close()
                signal_group(proc.pid, signal.SIGTERM)
                with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                    await asyncio.wait_for(proc.wait(), _STOP_GRACE_SECONDS)
        finally:
            if proc is not None:
                # Whatever is left of the group (MCP servers, helpers) goes too.
                signal_group(proc.pid, signal.SIGKILL)
                if proc.returncode is None:
                    with contextlib.suppress(Exception, asyncio.CancelledError):
                        await asyncio.wait_for(proc.wait(), _STOP_GRACE_SECONDS)
            if self._stderr is not None:
                self._stderr.close()
            reader.cancel()
            for task in [*self._handlers, reader]:
                task.cancel()
            for task in [*self._handlers, reader]:
                with contextlib.suppress(BaseException):
                    await task

    async def _interrupt(self) -> None:
        if self._thread_id is None or self._turn_id is None or self._turn_done.is_set():
            return
        with contextlib.suppress(_RpcError, ConnectionError, TimeoutError):
            await self._request(
                "turn/interrupt",
                {"threadId": self._thread_id, "turnId": self._turn_id},
                timeout=_INTERRUPT_WAIT_SECONDS,
            )
            await self._until(self._turn_done, timeout=_INTERRUPT_WAIT_SECONDS)

    # -- JSON-RPC --------------------------------------------------------------------------

    async def _send(self, message: Mapping[str, Any]) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None or self._closed.is_set():
            raise ConnectionError("codex app-server is not running")
        proc.stdin.write(json.dumps(message).encode() + b"\n")
        await proc.stdin.drain()

    async def _notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"method": method}
        if params is not None:
            message["params"] = params
        await self._send(message)

    async def _request(self, method: str, params: Mapping[str, Any], *, timeout: float) -> Any:
        self._next_id += 1
        request_id = self._next_id
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        try:
            await self._send({"id": request_id, "method": method, "params": params})
            result = await asyncio.wait_for(future, timeout)
        finally:
            self._waiting.pop(request_id, None)
        if isinstance(result, _RpcError):
            raise result
        return result

    async def _until(self, event: asyncio.Event, *, timeout: float) -> None:
        done = await self._first(event, self._closed, self._run.stopped, timeout=timeout)
        if not done:
            raise TimeoutError("codex app-server did not answer in time")
        if not event.is_set():
            raise ConnectionError("codex app-server stopped")

    async def _first(self, *events: asyncio.Event, timeout: float | None = None) -> bool:
        waits = [asyncio.create_task(event.wait()) for event in events]
        try:
            done, _ = await asyncio.wait(waits, timeout=timeout, return_when="FIRST_COMPLETED")
            return bool(done)
        finally:
            for wait in waits:
                wait.cancel()

    async def _read(self) -> None:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        await read_json_lines(
            proc.stdout,
            self._dispatch,
            agent="codex app-server",
            closed=self._closed,
            waiting=self._waiting,
            error=ConnectionError("codex app-server closed its output"),
        )

    def _dispatch(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        if method is None:  # a response to one of our requests
            future = self._waiting.get(message.get("id"))  # type: ignore[arg-type]
            if future is not None and not future.done():
                if "error" in message:
                    future.set_result(_RpcError(str(message.get("id")), message["error"]))
                else:
                    future.set_result(message.get("result"))
            return
        params = message.get("params") or {}
        if "id" in message:  # a server-to-client request: answer it in its own task
            task = asyncio.create_task(self._answer(message["id"], str(method), params))
            self._handlers.add(task)
            task.add_done_callback(self._handler_done)
            return
        self._on_notification(str(method), params)

    def _handler_done(self, task: asyncio.Task[None]) -> None:
        self._handlers.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None and self._unexpected is None:
            # A resolver bug: surface it from `run`, as the scripted harness does.
            self._unexpected = error
            self._run.stopped.set()

    # -- notifications -----------------------------------------------------------------------

    def _on_notification(self, method: str, params: Mapping[str, Any]) -> None:
        if method == "mcpServer/startupStatus/updated":
            if params.get("name") != self._task.server.name:
                return
            status = params.get("status")
            if status == "ready":
                self._mcp_ready.set()
            elif status in ("failed", "cancelled"):
                self._mcp_error = str(
                    params.get("error") or params.get("failureReason") or f"MCP server {status}"
                )
                self._mcp_ready.set()
        elif method == "item/started":
            self._item_started(params.get("item") or {})
        elif method == "item/completed":
            self._item_completed(params.get("item") or {})
        elif method == "thread/tokenUsage/updated":
            total = (params.get("tokenUsage") or {}).get("total") or {}
            self._usage = {
                _snake(name): int(value) for name, value in total.items() if isinstance(value, int)
            }
        elif method == "turn/completed":
            turn = params.get("turn") or {}
            if self._turn_id is None or turn.get("id") in (None, self._turn_id):
                self._turn_status = str(turn.get("status"))
                error = turn.get("error")
                if isinstance(error, Mapping):
                    self._turn_error = str(error.get("message") or error)
                self._turn_done.set()

    def _item_started(self, item: Mapping[str, Any]) -> None:
        if item.get("type") != "mcpToolCall":
            return
        item_id = str(item.get("id"))
        self._calls[item_id] = _Call(str(item.get("server")), str(item.get("tool")), item_id)
        self._call_order.append(item_id)

    def _item_completed(self, item: Mapping[str, Any]) -> None:
        kind = item.get("type")
        if kind == "agentMessage":
            self._final_message = str(item.get("text") or "")
        elif kind == "mcpToolCall":
            # The relay recorded what the server returned (Codex's copy is reworded).
            self._calls.pop(str(item.get("id")), None)

    def _open_call(self, server: str, tool: str | None = None) -> _Call | None:
        """The most recent MCP tool call in progress on `server` (named `tool`, if given)."""
        for item_id in reversed(self._call_order):
            call = self._calls.get(item_id)
            if call is None or call.server != server:
                continue
            if tool is None or call.tool == tool:
                return call
        return None

    # -- server-to-client requests -----------------------------------------------------------

    async def _answer(self, request_id: Any, method: str, params: Mapping[str, Any]) -> None:
        try:
            result = await self._handle(method, params)
        except _Unsupported as exc:
            with contextlib.suppress(ConnectionError, OSError):
                await self._send(
                    {"id": request_id, "error": {"code": _METHOD_NOT_FOUND, "message": str(exc)}}
                )
            return
        with contextlib.suppress(ConnectionError, OSError):
            await self._send({"id": request_id, "result": result})

    async def _handle(self, method: str, params: Mapping[str, Any]) -> Mapping[str, Any]:
        if method == "mcpServer/elicitation/request":
            meta = params.get("_meta")
            if isinstance(meta, Mapping) and meta.get("codex_approval_kind") == "mcp_tool_call":
                return self._approve_tool_call(params, meta)
            return await self._elicitation(params)
        allow = self._run.allows
        if method in ("item/commandExecution/requestApproval", "execCommandApproval"):
            self._run.prompt("command_execution", allow, params.get("command"))
            if method == "execCommandApproval":
                return {"decision": "approved" if allow else "denied"}
            return {"decision": "accept" if allow else "decline"}
        if method in ("item/fileChange/requestApproval", "applyPatchApproval"):
            self._run.prompt("file_change", allow, params.get("reason"))
            if method == "applyPatchApproval":
                return {"decision": "approved" if allow else "denied"}
            return {"decision": "accept" if allow else "decline"}
        if method == "item/permissions/requestApproval":
            self._run.prompt("permissions", allow, params.get("reason"))
            granted = params.get("permissions") if allow else {}
            return {"permissions": granted or {}, "scope": "turn"}
        if method == "item/tool/requestUserInput":
            # No human answers the agent's own questions; it gets no answers.
            self._run.prompt("user_input", False, None)
            return {"answers": {}}
        raise _Unsupported(f"m3grpc does not answer {method}")

    def _approve_tool_call(
        self, params: Mapping[str, Any], meta: Mapping[str, Any]
    ) -> Mapping[str, Any]:
        refusal = self._run.approve(str(params.get("serverName")), str(meta.get("tool_name")))
        return {"action": "accept", "content": {}} if refusal is None else {"action": "decline"}

    async def _elicitation(self, params: Mapping[str, Any]) -> Mapping[str, Any]:
        mode = str(params.get("mode") or "form")
        meta = params.get("_meta")
        schema = params.get("requestedSchema")
        forwarded = ForwardedElicitation(
            mode=mode,
            message=str(params.get("message") or ""),
            meta=meta if isinstance(meta, Mapping) else None,
            requested_schema=schema if isinstance(schema, Mapping) else None,
        )
        call = self._open_call(str(params.get("serverName")))
        answer = await self._run.elicitation(
            forwarded,
            harness_session_id=self._thread_id,
            turn_metadata={
                "harness": "codex",
                "codex_version": CODEX_VERSION,
                "thread_id": self._thread_id,
                "turn_id": params.get("turnId") or self._turn_id,
                "item_id": call.item_id if call is not None else None,
            },
        )
        reply: dict[str, Any] = {"action": answer.action}
        if answer.action == "accept" and mode == "form":
            reply["content"] = dict(answer.content or {})
        return reply


class _Unsupported(Exception):
    pass


def _snake(name: str) -> str:
    out = "".join(f"_{c.lower()}" if c.isupper() else c for c in name)
    return out.lstrip("_")


__all__ = ["CODEX_VERSION", "CodexHarness", "CodexSettings", "codex_config", "codex_schema"]
