"""The `claude-code` harness: Anthropic's Claude Code CLI works against the bound server.

Per execution: one headless CLI process (`m3grpc.harness.claude_code_host`: its own
process group, a temporary home, a loopback-only environment, SIGKILL when the
worker dies), given the prompt as one user message, until the turn's `result`.

As for codex (`m3grpc.harness.agent_run`), the CLI's only MCP server
(`--mcp-config` + `--strict-mcp-config`) is M3's agent relay named like the
binding, which connects to the bound server (the binding's protocol generation
applies; the CLI speaks the handshake generation to the relay) and records the
operations. The CLI is offered exactly the selected tools of the bound server
(the relay lists no other, and `--disallowedTools` names the others), no built-in
tool (`--tools ""`: an execution tests the server's tools, not the agent's own),
and MCP tools are never deferred behind its tool search. The CLI's control
requests are answered here:

- `can_use_tool` for a tool of the bound server: allowed for a selected tool;
  with no selection, the permission policy answers (a denial is a failed
  operation `permission_denied`); every other request (a tool the CLI would
  offer on its own) is answered by the permission policy and recorded as a
  native prompt.
- `elicitation`: the relay's round (the server's own request) is answered by the
  resolver, and the answer goes back to the server through the CLI. The CLI
  passes content unchecked; the round has validated it against the server's
  schema. Nothing in the CLI times a pending elicitation out (its MCP tool
  timeout is set to its maximum); a round's deadline is M3's.

The CLI drops the server's `_meta` from what it passes on, so the relay matches
an elicitation by its message (it asks one request at a time).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp_types import Implementation

from m3grpc.harness.agent_process import make_home, remove_stale_homes
from m3grpc.harness.agent_run import (
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
from m3grpc.harness.claude_code_host import (
    CLAUDE_CODE_VERSION,
    Allow,
    ClaudeCodeError,
    ClaudeCodeOptions,
    ClaudeCodeProcess,
    Deny,
    ElicitationReply,
    ElicitationRequest,
    PermissionRequest,
    ResultMessage,
    installed_binary,
)
from m3grpc.harness.relay import ForwardedElicitation, as_sent
from m3grpc.harness.scripted import ScriptedHarness
from m3grpc.types import AgentReport

logger = logging.getLogger(__name__)

RELAY_PREFIX = "m3-claude-relay-"
RELAY_CLIENT_INFO = Implementation(
    name="m3-agent-relay", title="M3 relay for Claude Code", version=CLAUDE_CODE_VERSION
)
_MCP_TOOL_PREFIX = "mcp__"


@dataclass(frozen=True)
class ClaudeCodeSettings:
    """Where the CLI is and which Messages API it talks to.

    - `binary`: default `$M3_CLAUDE_CODE_BIN`, else the one
      `scripts/setup-claude-code.sh` installed in this checkout, else `claude` on PATH.
    - `base_url`: an Anthropic Messages API base URL (`http://host:port`); None:
      Anthropic's.
    - `env_key`: the environment variable holding the API key; its value (from
      `env`, else this process's environment) is passed to the CLI as
      ANTHROPIC_API_KEY. Nothing else of this process's environment is.
    """

    binary: str | None = None
    base_url: str | None = None
    env_key: str = "ANTHROPIC_API_KEY"
    env: Mapping[str, str] = field(default_factory=dict)
    startup_timeout_seconds: float = 60.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ClaudeCodeSettings:
        """Settings from M3_CLAUDE_CODE_BIN, M3_CLAUDE_CODE_BASE_URL, M3_CLAUDE_CODE_ENV_KEY."""
        env = os.environ if environ is None else environ
        return cls(
            binary=env.get("M3_CLAUDE_CODE_BIN") or None,
            base_url=env.get("M3_CLAUDE_CODE_BASE_URL") or None,
            env_key=env.get("M3_CLAUDE_CODE_ENV_KEY") or "ANTHROPIC_API_KEY",
        )

    def resolved_binary(self) -> str:
        return self.binary or installed_binary()

    def missing_binary(self) -> str | None:
        """Why the CLI cannot be started (its binary is not there), or None."""
        return missing_executable(
            self.resolved_binary(),
            "Claude Code",
            "run `bash scripts/setup-claude-code.sh`, or set M3_CLAUDE_CODE_BIN "
            "(the service: [claude_code] binary)",
        )

    def api_key(self) -> str | None:
        return self.env.get(self.env_key, os.environ.get(self.env_key))


class ClaudeCodeHarness:
    """Runs an AgentSpec's prompt with Claude Code against the execution's bound MCP server."""

    name = "claude-code"

    def __init__(self, settings: ClaudeCodeSettings | None = None) -> None:
        self.settings = settings or ClaudeCodeSettings.from_env()
        # The relay's MCP client (HTTP connections, shared 2026-07-28 sessions).
        self._mcp = ScriptedHarness(client_info=RELAY_CLIENT_INFO)
        remove_stale_homes(RELAY_PREFIX)

    async def run(self, task: HarnessTask, resolve_input: InputResolver) -> HarnessOutcome:
        directory = make_home(RELAY_PREFIX)
        try:
            return await _ClaudeCodeRun(
                task, resolve_input, self.settings, directory, self._mcp
            ).execute()
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    async def aclose(self) -> None:
        """Close the relay's HTTP connections (the runtime calls it when it stops)."""
        await self._mcp.aclose()


class _ClaudeCodeRun:
    def __init__(
        self,
        task: HarnessTask,
        resolve: InputResolver,
        settings: ClaudeCodeSettings,
        directory: Path,
        mcp: ScriptedHarness,
    ) -> None:
        self._task = task
        self._settings = settings
        self._model = task.models[0] if task.models else None
        self._run = AgentRun(
            task, resolve, mcp, agent="claude-code", directory=directory, present_schema=as_sent
        )
        self._cli: ClaudeCodeProcess | None = None
        self._session_id: str | None = None
        self._result: ResultMessage | None = None

    async def execute(self) -> HarnessOutcome:
        return await self._run.drive(
            missing=self._settings.missing_binary(),
            agent=self._run_cli,
            outcome=lambda failure: self._outcome(failure=failure),
        )

    async def _run_cli(self) -> tuple[str, str] | None:
        cli = self._cli = ClaudeCodeProcess(
            await self._options(),
            can_use_tool=self._can_use_tool,
            on_elicitation=self._on_elicitation,
        )
        try:
            try:
                await cli.start()
                await cli.send_prompt(self._task.prompt)
            except (ClaudeCodeError, ConnectionError, OSError) as exc:
                return (AGENT_UNAVAILABLE, f"cannot start Claude Code: {exc}")
            return await self._converse(cli)
        finally:
            # Cancellation included: stops the CLI and its process group.
            await cli.close()

    async def _options(self) -> ClaudeCodeOptions:
        server = self._task.server.name
        command, args = self._run.relay.launch_command()
        disallowed: list[str] = []
        if self._task.tools:
            # The relay lists only the selected tools; the CLI's own filter is a second.
            selected = set(self._task.selected_tools())
            listed = [tool.name for tool in await self._run.relay.server_tools()]
            disallowed = [_mcp_tool(server, name) for name in listed if name not in selected]
        return ClaudeCodeOptions(
            binary=self._settings.resolved_binary(),
            model=self._model,
            mcp_servers={server: {"type": "stdio", "command": command, "args": args}},
            builtin_tools=(),
            disallowed_tools=disallowed,
            base_url=self._settings.base_url,
            api_key=self._settings.api_key(),
            mcp_startup_seconds=self._settings.startup_timeout_seconds,
            # The relay speaks the handshake generation: no `server/discover` probe first.
            env={**self._settings.env, "MCP_PROTOCOL_NEGOTIATION": "legacy"},
        )

    async def _converse(self, cli: ClaudeCodeProcess) -> tuple[str, str] | None:
        result = await _first_of(cli.wait_result(), self._run.stopped.wait())
        if result is None:  # the run must end (a round's deadline passed): end the turn
            with contextlib.suppress(ClaudeCodeError, ConnectionError, OSError):
                await cli.interrupt()
            with contextlib.suppress(ClaudeCodeError):
                self._result = await cli.wait_result()
            return self._run.stop_reason
        self._result = result
        self._session_id = result.session_id or self._session_id
        if self._run.stop_reason is not None:
            return self._run.stop_reason
        status = cli.mcp_server_status(self._task.server.name)
        if status not in (None, "connected"):
            return (
                SERVER_UNAVAILABLE,
                f"Claude Code did not connect to MCP server {self._task.server.name!r} "
                f"(status {status!r})",
            )
        if result.subtype != "success" or result.is_error:
            detail = "; ".join(result.errors or []) or result.result or result.subtype
            if result.terminal_reason and result.terminal_reason.startswith("aborted"):
                return (AGENT_TURN_INTERRUPTED, f"the agent's turn was interrupted: {detail}")
            return (AGENT_TURN_FAILED, f"the agent's turn failed: {detail}")
        return None

    def _outcome(self, *, failure: tuple[str, str] | None) -> HarnessOutcome:
        result = self._result
        report = AgentReport(
            harness="claude-code",
            model=self._model,
            session_id=self._session_id,
            turn_status=(result.terminal_reason or result.subtype) if result else None,
            final_message=result.result if result else None,
            token_usage=_usage(result.usage if result else None),
            native_prompts=tuple(self._run.prompts),
        )
        return HarnessOutcome(self._run.operations(failure), agent=report, failure=failure)

    # -- the CLI's control requests ------------------------------------------------------

    async def _can_use_tool(self, request: PermissionRequest) -> Allow | Deny:
        server, tool = _split_mcp_tool(request.tool_name, self._task.server.name)
        if server is not None and tool is not None:
            refusal = self._run.approve(server, tool)
            return Allow() if refusal is None else Deny(message=refusal)
        # A tool of the CLI's own (none is offered): the permission policy answers.
        allow = self._run.allows
        self._run.prompt("tool_use", allow, request.tool_name)
        if allow:
            return Allow()
        return Deny(message=f"the permission policy (deny) refused {request.tool_name}")

    async def _on_elicitation(self, request: ElicitationRequest) -> ElicitationReply:
        mode = request.mode or ("url" if request.url else "form")
        if self._session_id is None and self._cli is not None and self._cli.init:
            self._session_id = str(self._cli.init.get("session_id") or "") or None
        call = self._run.relay.asking_meta or {}
        answer = await self._run.elicitation(
            ForwardedElicitation(
                mode=mode, message=request.message, requested_schema=request.requested_schema
            ),
            harness_session_id=self._session_id,
            turn_metadata={
                "harness": "claude-code",
                "claude_code_version": CLAUDE_CODE_VERSION,
                "session_id": self._session_id,
                "tool_use_id": call.get("claudecode/toolUseId"),
            },
        )
        content = answer.content if answer.action == "accept" and mode == "form" else None
        return ElicitationReply(
            action=answer.action, content=dict(content) if content is not None else None
        )


async def _first_of(
    result: Coroutine[Any, Any, ResultMessage], stop: Coroutine[Any, Any, Any]
) -> ResultMessage | None:
    """The turn's result, or None if `stop` finished first."""
    turn = asyncio.ensure_future(result)
    stopped = asyncio.ensure_future(stop)
    try:
        done, _ = await asyncio.wait({turn, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if turn in done:
            return turn.result()
        return None
    finally:
        stopped.cancel()
        if not turn.done():
            turn.cancel()
            with contextlib.suppress(BaseException):
                await turn


def _mcp_tool(server: str, tool: str) -> str:
    return f"{_MCP_TOOL_PREFIX}{server}__{tool}"


def _split_mcp_tool(name: str, server: str) -> tuple[str | None, str | None]:
    """(server, tool) of an MCP tool name `mcp__<server>__<tool>` (the bound server's
    name is matched first: a server name may itself contain `__`)."""
    prefix = f"{_MCP_TOOL_PREFIX}{server}__"
    if name.startswith(prefix):
        return server, name.removeprefix(prefix)
    if name.startswith(_MCP_TOOL_PREFIX):
        other, _, tool = name.removeprefix(_MCP_TOOL_PREFIX).partition("__")
        return other, tool
    return None, None


def _usage(usage: Mapping[str, Any] | None) -> dict[str, int] | None:
    if not usage:
        return None
    counts = {name: value for name, value in usage.items() if isinstance(value, int)}
    if "input_tokens" in counts and "output_tokens" in counts:
        counts["total_tokens"] = counts["input_tokens"] + counts["output_tokens"]
    return counts


__all__ = ["ClaudeCodeHarness", "ClaudeCodeSettings"]
