"""Harnesses: the layer that drives an MCP server for one execution.

`Harness` is the protocol real agent harnesses implement; `ScriptedHarness`
(name "scripted") is the built-in deterministic one, a real MCP client;
`CodexHarness` (name "codex") runs OpenAI's Codex CLI as the agent, and
`ClaudeCodeHarness` (name "claude-code") Anthropic's Claude Code CLI, each through
the agent relay (`m3grpc.harness.relay`).
"""

from m3grpc.harness.base import (
    Harness,
    HarnessOutcome,
    HarnessTask,
    InputProtocol,
    InputResolver,
    InputRound,
    OperationRef,
    OperationStep,
    ResumePoint,
    operation_id,
    operation_index,
)
from m3grpc.harness.claude_code import ClaudeCodeHarness, ClaudeCodeSettings
from m3grpc.harness.codex import CodexHarness, CodexSettings
from m3grpc.harness.request_keys import DEFAULT_REQUEST_KEY, META_REQUEST_KEY
from m3grpc.harness.scripted import ScriptedHarness

__all__ = [
    "DEFAULT_REQUEST_KEY",
    "META_REQUEST_KEY",
    "ClaudeCodeHarness",
    "ClaudeCodeSettings",
    "CodexHarness",
    "CodexSettings",
    "Harness",
    "HarnessOutcome",
    "HarnessTask",
    "InputProtocol",
    "InputResolver",
    "InputRound",
    "OperationRef",
    "OperationStep",
    "ResumePoint",
    "ScriptedHarness",
    "operation_id",
    "operation_index",
]
