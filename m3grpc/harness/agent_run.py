"""What an agent harness's run shares, whichever the agent (Codex, Claude Code).

- the relay to the bound server (`m3grpc.harness.relay`), which runs and records
  the operations;
- one sequence of operation identities for the relay's operations and for the
  agent's tool calls refused before they reach it;
- the decision on each MCP tool call the agent asks to make: a selected tool of
  the bound server is approved; with no selection at all, the permission policy
  decides (a denial is a failed operation `permission_denied` that says so); any
  other call is refused `tool_not_selected` (the agent is not offered such tools:
  a second guard);
- the elicitations the agent passes on: answered from the relay's round, or, when
  the execution's resolver fails the round (its deadline passed, the execution
  is being cancelled), `cancel`, and the run ends with that failure;
- the native prompts answered, and the operations of the outcome.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import shutil
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from m3grpc.errors import M3Error
from m3grpc.harness.base import (
    PERMISSION_DENIED,
    TOOL_NOT_SELECTED,
    HarnessOutcome,
    HarnessTask,
    InputResolver,
    OperationRef,
    operation_id,
    operation_index,
)
from m3grpc.harness.relay import (
    AgentRelay,
    ForwardedElicitation,
    SchemaPresenter,
    UnknownElicitation,
)
from m3grpc.harness.scripted import ScriptedHarness
from m3grpc.types import ElicitationResponse, NativePrompt, OperationResult

logger = logging.getLogger(__name__)

# Failure codes of the agent harnesses (besides those in m3grpc.harness.base).
AGENT_FAILED = "agent_failed"
AGENT_UNAVAILABLE = "agent_unavailable"
AGENT_TURN_FAILED = "agent_turn_failed"
AGENT_TURN_INTERRUPTED = "agent_turn_interrupted"

_CANCEL = ElicitationResponse(action="cancel")
Failure = tuple[str, str]


def missing_executable(binary: str, what: str, remedy: str) -> str | None:
    """Why `binary` (a path, or a name looked up on PATH) cannot be run, or None."""
    found = shutil.which(binary) if os.sep not in binary else binary
    if found is not None and os.access(found, os.X_OK) and Path(found).is_file():
        return None
    return f"{what} is not installed (no executable {binary!r}): {remedy}"


class AgentRun:
    """One agent execution's shared state; the harness drives the agent around it."""

    def __init__(
        self,
        task: HarnessTask,
        resolve: InputResolver,
        mcp: ScriptedHarness,
        *,
        agent: str,
        directory: Path,
        present_schema: SchemaPresenter,
    ) -> None:
        self.task = task
        self.agent = agent
        self._selected = set(task.selected_tools())
        self._indices = itertools.count()
        self.relay = AgentRelay(
            task,
            resolve,
            mcp,
            directory=directory,
            agent=agent,
            next_index=lambda: next(self._indices),
            present_schema=present_schema,
        )
        self._refused: list[OperationResult] = []
        self.prompts: list[NativePrompt] = []
        # Set when the run must end early (a round's deadline passed, a cancel).
        self.stop_reason: tuple[str, str] | None = None
        self.stopped = asyncio.Event()

    async def drive(
        self,
        *,
        missing: str | None,
        agent: Callable[[], Awaitable[Failure | None]],
        outcome: Callable[[Failure | None], HarnessOutcome],
    ) -> HarnessOutcome:
        """The run: refused at once when the agent is `missing`, else the relay is
        started (a server that cannot be reached fails it) and `agent` runs the agent
        against it; the relay stops however that ends, cancellation included, before
        `outcome` reads the operations."""
        if missing is not None:
            return outcome((AGENT_UNAVAILABLE, missing))
        try:
            unreachable = await self.relay.start()
            if unreachable is not None:
                return outcome(unreachable)
            failure = await agent()
        finally:
            # The relay stops serving, its operation in flight ends, and the
            # connection to the server closes.
            await self.relay.aclose()
        return outcome(failure)

    @property
    def allows(self) -> bool:
        return self.task.permission_policy == "allow"

    def prompt(self, kind: str, allow: bool, detail: Any) -> None:
        """Record a native prompt of the agent and the policy's answer."""
        text = " ".join(map(str, detail)) if isinstance(detail, list) else detail
        self.prompts.append(
            NativePrompt(
                kind=kind,
                decision="allow" if allow else "deny",
                detail=str(text) if text is not None else None,
            )
        )

    def approve(self, server: str, tool: str) -> str | None:
        """Whether the agent may call `server:tool`: None, or why not (the refused
        call is recorded as a failed operation)."""
        bound = server == self.task.server.name
        if bound and tool in self._selected:
            return None
        if bound and not self.task.tools:
            # No selection: every tool is offered, and the permission policy answers.
            self.prompt("mcp_tool_call", self.allows, f"{server}:{tool}")
            if self.allows:
                return None
            code = PERMISSION_DENIED
            message = f"the permission policy (deny) refused {self.agent}'s call to {server}:{tool}"
        else:
            code = TOOL_NOT_SELECTED
            message = f"tool {server}:{tool} is not in the execution's tool selection"
        ref = OperationRef(
            logical_operation_id=operation_id(next(self._indices)),
            server=server,
            operation_kind="tool",
            operation_name=tool,
            arguments={},
        )
        self._refused.append(ref.failed(code, message))
        logger.info("refused %s's call to %s:%s (%s)", self.agent, server, tool, code)
        return message

    async def elicitation(
        self,
        forwarded: ForwardedElicitation,
        *,
        harness_session_id: str | None,
        turn_metadata: Mapping[str, Any],
    ) -> ElicitationResponse:
        """The answer for an elicitation the agent passed on (`cancel` once the run
        is ending)."""
        if self.stop_reason is not None:
            return _CANCEL
        try:
            return await self.relay.answer(
                forwarded, harness_session_id=harness_session_id, turn_metadata=turn_metadata
            )
        except UnknownElicitation as exc:
            logger.warning("%s passed on an elicitation M3 did not relay: %s", self.agent, exc)
            return _CANCEL
        except M3Error as exc:
            logger.warning(
                "execution %s: the input resolver raised %s",
                self.task.execution_id,
                type(exc).__name__,
            )
            self.end((exc.reason.lower(), str(exc)))
            return _CANCEL

    def end(self, failure: tuple[str, str]) -> None:
        """The run cannot go on: the harness ends the agent's turn."""
        if self.stop_reason is None:
            self.stop_reason = failure
        self.stopped.set()

    def operations(self, failure: tuple[str, str] | None) -> list[OperationResult]:
        """The run's operations in order: what the relay ran, the calls refused before
        it, and (when the run ended early) each one cut short, failed with the reason.
        Raises what an operation raised of M3's own (a resolver bug)."""
        if self.relay.unexpected is not None:
            raise self.relay.unexpected
        results = [*self.relay.operations, *self._refused]
        if failure is not None:
            results += [ref.failed(*failure) for ref in self.relay.unfinished]
        results.sort(key=lambda result: operation_index(result.logical_operation_id) or 0)
        return results


__all__ = [
    "AGENT_FAILED",
    "AGENT_TURN_FAILED",
    "AGENT_TURN_INTERRUPTED",
    "AGENT_UNAVAILABLE",
    "AgentRun",
    "missing_executable",
]
