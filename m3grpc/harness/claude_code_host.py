"""The host side of Claude Code's stream-json control protocol: one CLI process, driven headless.

Claude Code (`claude -p --input-format stream-json --output-format stream-json`)
reads one JSON object a line on stdin and writes one a line on stdout. The host
writes the user's prompt (`{"type": "user", ...}`) and `control_request`s of its
own (`interrupt`); the CLI writes conversation messages (`system`, `assistant`,
`user` with tool results, `result` at the end of a turn) and `control_request`s
that the host must answer with a `control_response` carrying the same
`request_id`:

- `can_use_tool` (with `--permission-prompt-tool stdio`): may the agent run this
  tool with this input? -> `{"behavior": "allow", "updatedInput": ...}` or
  `{"behavior": "deny", "message": ...}`;
- `elicitation`: an MCP server asked its client for input -> `{"action", "content"}`,
  passed to the server as given;
- any other subtype: an error response (the CLI then does without).

A `control_cancel_request` withdraws a request the CLI no longer waits for: its
callback is cancelled and nothing is answered.

`ClaudeCodeProcess` starts the CLI (its own process group, a temporary HOME and
CLAUDE_CONFIG_DIR removed afterwards, a minimal environment that keeps it on
loopback, SIGKILL when the starting thread dies), runs a reader loop that hands
control requests to the callbacks the caller supplies (each in its own task, so
several can be pending at once), records the conversation, and on `close` leaves
nothing running. It knows nothing of executions, rounds or storage: a harness
builds on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field

from m3grpc.harness.agent_process import (
    make_home,
    parent_death_prefix,
    read_json_lines,
    remove_stale_homes,
    signal_group,
)

logger = logging.getLogger(__name__)

CLAUDE_CODE_VERSION = "2.1.328"
HOME_PREFIX = "m3-claude-code-"

_REPO_ROOT = Path(__file__).resolve().parents[2]
_LINE_LIMIT = 64 * 1024 * 1024  # one JSON message a line; tool results can be large
_STOP_GRACE_SECONDS = 5.0
_CONTROL_TIMEOUT_SECONDS = 30.0

# The environment that keeps the CLI headless and on loopback: no telemetry, no error
# reports, no update checks, nothing "non-essential"; MCP tools in the model's tool list
# rather than behind the deferred ToolSearch tool; and no time limit on an MCP tool call:
# MCP_TOOL_TIMEOUT also cuts a pending elicitation (15000 did, at 15 s), so it is set as
# high as a JavaScript timer goes (about 24.8 days) and deadlines stay the caller's.
HEADLESS_ENV: Mapping[str, str] = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_UPDATES": "1",
    "ENABLE_TOOL_SEARCH": "false",
    "MCP_TOOL_TIMEOUT": "2147483647",
}
# Taken from this process's environment when set; nothing else of it is passed.
_PASSED_ENV = ("LANG", "LC_ALL", "SSL_CERT_FILE")


def installed_binary() -> str:
    """The CLI: `$M3_CLAUDE_CODE_BIN`, else the native binary `scripts/setup-claude-code.sh`
    installed in this checkout, else `claude` on PATH."""
    configured = os.environ.get("M3_CLAUDE_CODE_BIN")
    if configured:
        return configured
    scope = _REPO_ROOT / "tools" / "claude-code" / "node_modules" / "@anthropic-ai"
    installed = sorted(scope.glob("claude-code-*/claude"))
    if installed:
        return str(installed[0])
    return shutil.which("claude") or "claude"


@dataclass(frozen=True)
class ClaudeCodeOptions:
    """How to start one CLI process.

    - `mcp_servers`: the `mcpServers` of `--mcp-config` (name -> `{"command", "args",
      "env"}` or `{"type": "http", "url", "headers"}`); with `--strict-mcp-config`
      they are the only MCP servers.
    - `builtin_tools`: the built-in tools offered (`--tools`); none by default.
    - `allowed_tools`: rules that skip the `can_use_tool` prompt (`--allowedTools`).
    - `disallowed_tools`: tools removed from what the model is offered (`--disallowedTools`),
      e.g. `mcp__<server>__<tool>`.
    - `base_url`, `api_key`: the Messages API (`ANTHROPIC_BASE_URL`, `ANTHROPIC_API_KEY`).
    - `mcp_startup_seconds`: how long the CLI waits for the MCP servers before the turn
      starts (`MCP_TIMEOUT`; the CLI's default is 30 s). A server not connected by then
      is left out of the turn: its tools are not offered (see `mcp_server_status`).
    - `env`: more environment variables; they win over the defaults, and None removes one.
    """

    binary: str = field(default_factory=installed_binary)
    model: str | None = None
    mcp_servers: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    builtin_tools: Sequence[str] = ()
    allowed_tools: Sequence[str] = ()
    disallowed_tools: Sequence[str] = ()
    base_url: str | None = None
    api_key: str | None = None
    mcp_startup_seconds: float = 60.0
    env: Mapping[str, str | None] = field(default_factory=dict)
    extra_args: Sequence[str] = ()


# -- what the CLI asks -------------------------------------------------------------------


class _Lenient(BaseModel):
    # The CLI adds fields across versions; keep them (`model_extra`) rather than fail.
    model_config = ConfigDict(extra="allow", frozen=True)


class PermissionRequest(_Lenient):
    """A `can_use_tool` control request: may the agent run `tool_name` with `input`?

    `tool_name` is `mcp__<server>__<tool>` for an MCP tool, else a built-in's name."""

    subtype: Literal["can_use_tool"] = "can_use_tool"
    tool_name: str
    input: dict[str, Any] = Field(default_factory=dict)
    tool_use_id: str | None = None
    permission_suggestions: list[dict[str, Any]] | None = None
    blocked_path: str | None = None
    decision_reason: str | None = None
    title: str | None = None
    display_name: str | None = None
    description: str | None = None
    agent_id: str | None = None


class Allow(BaseModel):
    """Let the tool run; `updated_input` replaces the input (None keeps it)."""

    updated_input: dict[str, Any] | None = None


class Deny(BaseModel):
    """Refuse the tool call; the model reads `message` as the tool's error. `interrupt`
    also ends the turn."""

    message: str
    interrupt: bool = False


class ElicitationRequest(_Lenient):
    """An `elicitation` control request: MCP server `mcp_server_name` asked for input.

    Form mode has `requested_schema` (as the server sent it; JSON key order is not
    kept, `property_order` gives the properties' order); URL mode has `url` and
    `elicitation_id`."""

    subtype: Literal["elicitation"] = "elicitation"
    mcp_server_name: str
    message: str
    mode: Literal["form", "url"] | None = None
    url: str | None = None
    elicitation_id: str | None = None
    requested_schema: dict[str, Any] | None = None
    property_order: list[str] | None = None
    title: str | None = None
    display_name: str | None = None
    description: str | None = None


class ElicitationReply(BaseModel):
    """The answer to an elicitation, as the MCP server receives it."""

    action: Literal["accept", "decline", "cancel"]
    content: dict[str, Any] | None = None


CanUseTool = Callable[[PermissionRequest], Awaitable[Allow | Deny]]
# The reply may be an ElicitationReply or its dict form (`{"action", "content"}`).
OnElicitation = Callable[[ElicitationRequest], Awaitable[ElicitationReply | Mapping[str, Any]]]
OnMessage = Callable[[Mapping[str, Any]], None]
# Sees every line either way: ("in", what the CLI wrote) or ("out", what the host wrote).
Trace = Callable[[Literal["in", "out"], Mapping[str, Any]], None]


async def deny_every_tool(request: PermissionRequest) -> Allow | Deny:
    return Deny(message=f"{request.tool_name} is not allowed here")


async def cancel_every_elicitation(request: ElicitationRequest) -> ElicitationReply:
    return ElicitationReply(action="cancel")


# -- what the CLI reports ----------------------------------------------------------------


class ToolUse(_Lenient):
    """A `tool_use` block of an assistant message."""

    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


class ToolResult(_Lenient):
    """A `tool_result` block the CLI sent back to the model (in a `user` message)."""

    tool_use_id: str
    content: str | list[dict[str, Any]] | None = None
    is_error: bool = False

    @property
    def text(self) -> str:
        if isinstance(self.content, list):
            return " ".join(str(block.get("text", "")) for block in self.content).strip()
        return self.content or ""


class ResultMessage(_Lenient):
    """The `result` message that ends a turn.

    `subtype` is "success" or an error kind ("error_during_execution",
    "error_max_turns", ...); `is_error` is also true for a "success" that ended on an
    API failure (`api_error_status`). `terminal_reason` says why the loop ended
    ("completed", "aborted_streaming", "aborted_tools", ...)."""

    subtype: str
    is_error: bool
    session_id: str
    result: str | None = None
    num_turns: int | None = None
    usage: dict[str, Any] | None = None
    stop_reason: str | None = None
    terminal_reason: str | None = None
    api_error_status: int | None = None
    errors: list[str] | None = None
    permission_denials: list[dict[str, Any]] | None = None
    total_cost_usd: float | None = None
    duration_ms: int | None = None


class ClaudeCodeError(Exception):
    """The CLI could not be started, stopped early, or refused a control request."""


class ClaudeCodeProcess:
    """One headless Claude Code process and its conversation (an async context manager).

        async with ClaudeCodeProcess(options, on_elicitation=answer) as claude:
            await claude.send_prompt("Book a shipment.")
            result = await claude.wait_result()

    Callbacks run in tasks of their own; an exception in one is answered as an error
    response (the CLI treats a failed `elicitation` as `cancel`) and logged.
    """

    def __init__(
        self,
        options: ClaudeCodeOptions,
        *,
        can_use_tool: CanUseTool = deny_every_tool,
        on_elicitation: OnElicitation = cancel_every_elicitation,
        on_message: OnMessage | None = None,
        trace: Trace | None = None,
    ) -> None:
        self.options = options
        self._trace = trace
        self._can_use_tool = can_use_tool
        self._on_elicitation = on_elicitation
        self._on_message = on_message
        self.home: Path | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._handlers: dict[str, asyncio.Task[None]] = {}
        self._waiting: dict[str, asyncio.Future[Mapping[str, Any]]] = {}
        self._next_request = 0
        self._write_lock = asyncio.Lock()
        self._closed = asyncio.Event()
        self._result_ready = asyncio.Event()
        # What the CLI reported, in order.
        self.messages: list[dict[str, Any]] = []
        self.init: dict[str, Any] | None = None
        self.tool_uses: list[ToolUse] = []
        self.tool_results: list[ToolResult] = []
        self.results: list[ResultMessage] = []
        # (subtype, error) of every control request of the CLI answered with an error.
        self.refused_requests: list[tuple[str, str]] = []
        self._results_taken = 0

    # -- lifecycle ---------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode if self._proc is not None else None

    def command(self, mcp_config: Path) -> list[str]:
        """The CLI's command line (without the parent-death prefix)."""
        options = self.options
        args = [
            options.binary,
            "-p",
            "--input-format",
            "stream-json",
            "--output-format",
            "stream-json",
            "--verbose",
            # No user, project or local settings, hooks or CLAUDE.md settings files.
            "--setting-sources",
            "",
            "--mcp-config",
            str(mcp_config),
            "--strict-mcp-config",
            "--no-session-persistence",
            # Every permission question comes to the host as `can_use_tool`.
            "--permission-prompt-tool",
            "stdio",
            "--tools",
            ",".join(options.builtin_tools),
        ]
        if options.model:
            args += ["--model", options.model]
        if options.allowed_tools:
            args += ["--allowedTools", ",".join(options.allowed_tools)]
        if options.disallowed_tools:
            args += ["--disallowedTools", ",".join(options.disallowed_tools)]
        return [*args, *options.extra_args]

    def environment(self, home: Path) -> dict[str, str]:
        """The CLI's whole environment: nothing of this process's but PATH and locale."""
        env = {
            "HOME": str(home),
            "CLAUDE_CONFIG_DIR": str(home / ".claude"),
            # The CLI keeps a socket directory in TMPDIR; inside the home it goes with it.
            "TMPDIR": str(home / "tmp"),
            "PATH": os.environ.get("PATH", os.defpath),
            **HEADLESS_ENV,
            "MCP_TIMEOUT": str(int(self.options.mcp_startup_seconds * 1000)),
        }
        env.update({name: os.environ[name] for name in _PASSED_ENV if name in os.environ})
        if self.options.base_url:
            env["ANTHROPIC_BASE_URL"] = self.options.base_url
        if self.options.api_key:
            env["ANTHROPIC_API_KEY"] = self.options.api_key
        for name, value in self.options.env.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        return env

    async def start(self) -> None:
        """Start the CLI; raises ClaudeCodeError when it cannot be started."""
        if self._proc is not None:
            raise ClaudeCodeError("this Claude Code process was already started")
        remove_stale_homes(HOME_PREFIX)
        self.home = home = make_home(HOME_PREFIX)
        (home / "tmp").mkdir()
        (home / "work").mkdir()
        mcp_config = home / "mcp.json"
        mcp_config.write_text(
            json.dumps({"mcpServers": dict(self.options.mcp_servers)}), encoding="utf-8"
        )
        try:
            with (home / "stderr.log").open("wb") as stderr:
                self._proc = await asyncio.create_subprocess_exec(
                    *parent_death_prefix(),
                    *self.command(mcp_config),
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    # Kept in the home (removed with it) and quoted when the CLI fails.
                    stderr=stderr,
                    cwd=str(home / "work"),
                    env=self.environment(home),
                    limit=_LINE_LIMIT,
                    # Own process group: stopping it stops the MCP server children too.
                    start_new_session=True,
                )
        except OSError as exc:
            shutil.rmtree(home, ignore_errors=True)
            self.home = None
            raise ClaudeCodeError(f"cannot start Claude Code: {exc}") from exc
        self._reader = asyncio.create_task(self._read(), name="claude-code-reader")

    async def close(self) -> None:
        """Stop the CLI and everything in its process group, drop the tasks, remove
        the home. Safe to call more than once, and on cancellation."""
        proc = self._proc
        try:
            if proc is not None and proc.returncode is None:
                if proc.stdin is not None:
                    with contextlib.suppress(Exception):
                        proc.stdin.close()
                # Closing stdin ends the CLI; SIGTERM only if it takes its time.
                with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                    await asyncio.wait_for(asyncio.shield(proc.wait()), _STOP_GRACE_SECONDS)
                signal_group(proc.pid, signal.SIGTERM)
                with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                    await asyncio.wait_for(asyncio.shield(proc.wait()), _STOP_GRACE_SECONDS)
        finally:
            if proc is not None:
                # Whatever is left of the group (MCP servers, helpers) goes too.
                signal_group(proc.pid, signal.SIGKILL)
                if proc.returncode is None:
                    with contextlib.suppress(Exception, asyncio.CancelledError):
                        await asyncio.wait_for(proc.wait(), _STOP_GRACE_SECONDS)
            tasks = [*self._handlers.values(), *([self._reader] if self._reader else [])]
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(BaseException):
                    await task
            self._handlers.clear()
            if self.home is not None:
                shutil.rmtree(self.home, ignore_errors=True)

    def mcp_server_status(self, name: str) -> str | None:
        """The status the CLI reported for MCP server `name` when the turn started
        ("connected", "pending" when it was not ready in time, "failed", ...); None
        before the `init` message."""
        for server in (self.init or {}).get("mcp_servers") or ():
            if isinstance(server, Mapping) and server.get("name") == name:
                return str(server.get("status"))
        return None

    def stderr_tail(self, limit: int = 2000) -> str:
        """The exit status and the end of the CLI's stderr, for failure messages."""
        text = ""
        if self.home is not None:
            with contextlib.suppress(OSError):
                text = (self.home / "stderr.log").read_text(encoding="utf-8", errors="replace")
        return f"(exit status {self.returncode}) {text[-limit:].strip()}".strip()

    # -- the conversation --------------------------------------------------------------

    async def send_prompt(self, text: str) -> None:
        """Start a turn with a user message."""
        await self._send(
            {
                "type": "user",
                "session_id": "",
                "message": {"role": "user", "content": text},
                "parent_tool_use_id": None,
            }
        )

    async def wait_result(self) -> ResultMessage:
        """The `result` of the turn in progress (the first not yet taken); raises
        ClaudeCodeError when the CLI ends its output first. Nothing here times out."""
        while len(self.results) <= self._results_taken:
            if self._closed.is_set():
                raise ClaudeCodeError(
                    f"Claude Code stopped before the turn ended: {self.stderr_tail()}"
                )
            self._result_ready.clear()
            waits = [
                asyncio.create_task(self._result_ready.wait()),
                asyncio.create_task(self._closed.wait()),
            ]
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for wait in waits:
                    wait.cancel()
        self._results_taken += 1
        return self.results[self._results_taken - 1]

    async def interrupt(self) -> None:
        """Ask the CLI to stop the turn in progress (the `interrupt` control request);
        its `result` follows."""
        await self.control({"subtype": "interrupt"})

    async def control(
        self, request: Mapping[str, Any], *, timeout: float = _CONTROL_TIMEOUT_SECONDS
    ) -> Mapping[str, Any]:
        """Send a control request of the host's own and return the CLI's response;
        raises ClaudeCodeError for an error response or no response in `timeout`."""
        self._next_request += 1
        request_id = f"m3_{self._next_request}"
        future: asyncio.Future[Mapping[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        try:
            await self._send(
                {"type": "control_request", "request_id": request_id, "request": dict(request)}
            )
            response = await asyncio.wait_for(future, timeout)
        except TimeoutError as exc:
            raise ClaudeCodeError(f"no answer to control request {request!r}") from exc
        finally:
            self._waiting.pop(request_id, None)
        if response.get("subtype") == "error":
            raise ClaudeCodeError(f"control request refused: {response.get('error')}")
        answer = response.get("response")
        return answer if isinstance(answer, Mapping) else {}

    # -- reading -------------------------------------------------------------------------

    async def _send(self, message: Mapping[str, Any]) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None or self._closed.is_set():
            raise ClaudeCodeError("Claude Code is not running")
        if self._trace is not None:
            self._trace("out", message)
        async with self._write_lock:
            try:
                proc.stdin.write(json.dumps(message).encode() + b"\n")
                await proc.stdin.drain()
            except (ConnectionError, OSError) as exc:
                raise ClaudeCodeError(f"cannot write to Claude Code: {exc}") from exc

    async def _read(self) -> None:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        await read_json_lines(
            proc.stdout,
            self._dispatch,
            agent="Claude Code",
            closed=self._closed,
            waiting=self._waiting,
            error=ClaudeCodeError("Claude Code closed its output"),
        )

    def _dispatch(self, message: dict[str, Any]) -> None:
        if self._trace is not None:
            self._trace("in", message)
        kind = message.get("type")
        if kind == "control_response":
            response = message.get("response") or {}
            future = self._waiting.get(str(response.get("request_id")))
            if future is not None and not future.done():
                future.set_result(response)
            return
        if kind == "control_request":
            request_id = str(message.get("request_id"))
            request = message.get("request") or {}
            task = asyncio.create_task(self._answer(request_id, request))
            self._handlers[request_id] = task
            task.add_done_callback(lambda _: self._handlers.pop(request_id, None))
            return
        if kind == "control_cancel_request":
            # The CLI gave up on that request (e.g. the turn was interrupted).
            handler = self._handlers.pop(str(message.get("request_id")), None)
            if handler is not None:
                handler.cancel()
            return
        self.messages.append(message)
        self._record(kind, message)
        if self._on_message is not None:
            self._on_message(message)

    def _record(self, kind: Any, message: Mapping[str, Any]) -> None:
        if kind == "system" and message.get("subtype") == "init":
            self.init = dict(message)
        elif kind in ("assistant", "user"):
            content = (message.get("message") or {}).get("content")
            for block in content if isinstance(content, list) else ():
                if not isinstance(block, Mapping):
                    continue
                if block.get("type") == "tool_use":
                    self.tool_uses.append(ToolUse.model_validate(block))
                elif block.get("type") == "tool_result":
                    self.tool_results.append(ToolResult.model_validate(block))
        elif kind == "result":
            self.results.append(ResultMessage.model_validate(message))
            self._result_ready.set()

    async def _answer(self, request_id: str, request: Mapping[str, Any]) -> None:
        subtype = request.get("subtype")
        try:
            if subtype == "can_use_tool":
                permission = PermissionRequest.model_validate(request)
                decision = await self._can_use_tool(permission)
                response: dict[str, Any]
                if isinstance(decision, Allow):
                    updated = decision.updated_input
                    response = {
                        "behavior": "allow",
                        "updatedInput": permission.input if updated is None else updated,
                    }
                else:
                    response = {"behavior": "deny", "message": decision.message}
                    if decision.interrupt:
                        response["interrupt"] = True
            elif subtype == "elicitation":
                reply = await self._on_elicitation(ElicitationRequest.model_validate(request))
                response = ElicitationReply.model_validate(reply).model_dump(exclude_none=True)
            else:
                raise ClaudeCodeError(f"m3grpc does not answer control requests of {subtype!r}")
        except asyncio.CancelledError:
            raise  # withdrawn by the CLI, or the process is closing: no answer
        except Exception as exc:
            if not isinstance(exc, ClaudeCodeError):
                logger.exception("answering Claude Code's %s request failed", subtype)
            error = str(exc) or repr(exc)
            self.refused_requests.append((str(subtype), error))
            await self._respond({"subtype": "error", "request_id": request_id, "error": error})
            return
        await self._respond({"subtype": "success", "request_id": request_id, "response": response})

    async def _respond(self, response: Mapping[str, Any]) -> None:
        with contextlib.suppress(ClaudeCodeError):
            await self._send({"type": "control_response", "response": dict(response)})


__all__ = [
    "CLAUDE_CODE_VERSION",
    "HEADLESS_ENV",
    "HOME_PREFIX",
    "Allow",
    "CanUseTool",
    "ClaudeCodeError",
    "ClaudeCodeOptions",
    "ClaudeCodeProcess",
    "Deny",
    "ElicitationReply",
    "ElicitationRequest",
    "OnElicitation",
    "OnMessage",
    "PermissionRequest",
    "ResultMessage",
    "ToolResult",
    "ToolUse",
    "Trace",
    "cancel_every_elicitation",
    "deny_every_tool",
    "installed_binary",
]
