"""The harnesses of the matrix, each behind one small interface for the scenarios.

`Agent.submit(kit, server, calls)` makes the harness call those tools in that order:
the scripted harness as its script, an agent harness through its fake model (the
only stand-in: a loopback fake of the hosted LLM, which Codex or Claude Code then
drives for real). `Agent.service_env` is the environment a `m3grpc serve` needs to
run the same harness on the same fake model.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from m3grpc import MCPTestKit
from m3grpc.client import RemoteMCPTestKit
from m3grpc.devtools.fake_anthropic import (
    FAKE_ANTHROPIC_API_KEY,
    FAKE_CLAUDE_MODEL,
    FakeAnthropic,
    offered_tools,
    tool_results,
)
from m3grpc.devtools.fake_model import FAKE_API_KEY, FAKE_MODEL_NAME, FakeModel
from m3grpc.devtools.fake_model import offered_tools as codex_offered_tools
from m3grpc.devtools.fake_server import CallTool
from m3grpc.harness import Harness
from m3grpc.harness.claude_code import ClaudeCodeHarness, ClaudeCodeSettings
from m3grpc.harness.codex import CodexHarness, CodexSettings
from m3grpc.servers import ServerBinding
from m3grpc.storage import SqlExecutionStore
from tests.support.claude_code import claude_code_binary, claude_code_processes
from tests.support.codex import KEY_VAR, codex_binary, codex_processes

PROMPT = "Use the tools to do the task."
Call = tuple[str, Mapping[str, Any]]  # (tool, arguments)


@dataclass
class Agent:
    name: str
    models: tuple[str, ...] = ()
    harness: Harness | None = None  # None: the kit's own scripted harness
    model: FakeModel | FakeAnthropic | None = None
    service_env: Mapping[str, str] = field(default_factory=dict)
    # Live processes of this agent started by this test process.
    processes: Callable[[], list[int]] = list

    @property
    def is_agent(self) -> bool:
        return self.model is not None

    def kit(self, store: SqlExecutionStore) -> MCPTestKit:
        harnesses = {} if self.harness is None else {self.name: self.harness}
        return MCPTestKit(store=store, env={}, poll_interval=0.1, harnesses=harnesses)

    def submit(
        self,
        kit: MCPTestKit | RemoteMCPTestKit,
        server: ServerBinding | str,
        calls: Sequence[Call],
        *,
        tools: Sequence[str] | None = None,
        **options: Any,
    ) -> Any:
        """Submit an execution that calls `calls` on `server` (a binding, or a binding's
        name for a service's kit), selecting those tools unless `tools` says otherwise;
        its handle."""
        agent = kit.agents([{"harness": self.name, "models": list(self.models)}])[0]
        name = server if isinstance(server, str) else server.name
        if tools is None:
            tools = [f"{name}:{tool}" for tool, _ in calls]
        options.setdefault("human_input", "managed")
        if self.model is None:
            script = [
                {"kind": "tool", "name": tool, "arguments": dict(args)} for tool, args in calls
            ]
            return agent.submit(PROMPT, server=server, tools=list(tools), script=script, **options)
        self.model.queue(*(CallTool(name, tool, dict(args)) for tool, args in calls))
        return agent.submit(PROMPT, server=server, tools=list(tools), **options)

    def offered_mcp_tools(self) -> list[str]:
        """The MCP tools the agent offered its model in its first request, as `tool`."""
        assert self.model is not None and self.model.requests, "no model request"
        first = self.model.requests[0]
        if isinstance(self.model, FakeModel):
            names = codex_offered_tools(first)
            return [n.split("/", 1)[1] for n in names if n.startswith("mcp__")]
        return [n.split("__", 2)[2] for n in offered_tools(first) if n.startswith("mcp__")]

    def last_tool_result(self) -> str:
        """The text of the last tool result the model received (the server's output
        as the agent passed it on)."""
        assert self.model is not None
        if isinstance(self.model, FakeAnthropic):
            for body in reversed(self.model.requests):
                results = tool_results(body)
                if results:
                    return results[-1].text
            raise AssertionError("the model received no tool result")
        for body in reversed(self.model.requests):
            items = body.get("input") or []
            if items and items[-1].get("type") == "function_call_output":
                return str(items[-1].get("output"))
        raise AssertionError("the model received no tool result")


@contextmanager
def scripted() -> Iterator[Agent]:
    yield Agent("scripted")


@contextmanager
def codex() -> Iterator[Agent]:
    binary = codex_binary()
    with FakeModel() as model:
        settings = CodexSettings(
            binary=binary, base_url=model.base_url, env_key=KEY_VAR, env={KEY_VAR: FAKE_API_KEY}
        )
        yield Agent(
            "codex",
            (FAKE_MODEL_NAME,),
            CodexHarness(settings),
            model,
            service_env={
                "M3_CODEX_BIN": binary,
                "M3_CODEX_BASE_URL": model.base_url,
                "M3_CODEX_ENV_KEY": KEY_VAR,
                KEY_VAR: FAKE_API_KEY,
            },
            processes=lambda: codex_processes(binary),
        )


@contextmanager
def claude_code() -> Iterator[Agent]:
    binary = claude_code_binary()
    key = "M3_FAKE_ANTHROPIC_KEY"
    with FakeAnthropic() as model:
        settings = ClaudeCodeSettings(
            binary=binary, base_url=model.base_url, env_key=key, env={key: FAKE_ANTHROPIC_API_KEY}
        )
        yield Agent(
            "claude-code",
            (FAKE_CLAUDE_MODEL,),
            ClaudeCodeHarness(settings),
            model,
            service_env={
                "M3_CLAUDE_CODE_BIN": binary,
                "M3_CLAUDE_CODE_BASE_URL": model.base_url,
                "M3_CLAUDE_CODE_ENV_KEY": key,
                key: FAKE_ANTHROPIC_API_KEY,
            },
            processes=lambda: claude_code_processes(binary),
        )


AGENTS = {"scripted": scripted, "codex": codex, "claude-code": claude_code}


def environ_with(env: Mapping[str, str]) -> dict[str, str]:
    return {**os.environ, **env}


def path_of(name: str) -> Path:
    return Path(__file__).resolve().parents[2] / "mcp_servers" / name
