"""A FAKE hosted model: a loopback HTTP server speaking the Anthropic Messages API.

It stands in for the hosted LLM and nothing else, so that the real Claude Code
CLI can run against real MCP servers in tests without a network or an account.
It is not a model: it plays a script (see `fake_server`).

Claude Code (2.1.328, `ANTHROPIC_BASE_URL` pointing here) sends
`POST /v1/messages?beta=true` with `"stream": true` and the whole conversation
each time; it falls back to a non-streaming request when a stream breaks. Both
are answered; `POST /v1/messages/count_tokens` gets an estimate, any `GET` an
empty model list. Anything else is answered 404 and recorded in `unanswered`.

Default behaviour, per message request:

- the last message carries tool results: a final text quoting them,
  `Done: <result text>`;
- otherwise: call the first MCP tool offered (`mcp__<server>__<tool>` in
  `tools[]`), with input `{}`;
- no MCP tool offered: the text "I have no tool to call.".

Steps a test can queue (`FakeAnthropic(script=[...])`), one per request:

- `CallTool(server, tool, arguments)`: a `tool_use` block for MCP tool
  `mcp__<server>__<tool>`;
- `UseTool(name, input)`: a `tool_use` block for any tool by the name the
  model sees (a built-in such as `Bash`);
- `CallTools(calls)`: several `tool_use` blocks in one assistant message
  (parallel tool calls);
- `Reply(text)`: a final text;
- `Fail(status)`: an HTTP error (Claude Code retries 5xx and 429).

`requests` records every message request body; `offered_tools(body)` and
`tool_results(body)` read what the agent sent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import urlsplit

from m3grpc.devtools.fake_server import (
    CallTool,
    Fail,
    QuietHandler,
    Reply,
    ScriptedFake,
    quoted_result,
)

MCP_TOOL_PREFIX = "mcp__"
# A Claude model id: the CLI takes any name, but warns about one it does not know.
FAKE_CLAUDE_MODEL = "claude-sonnet-4-5"
# Claude Code needs a key to start without a login; it sends it as `x-api-key`.
FAKE_ANTHROPIC_API_KEY = "m3-fake-anthropic-key"
_NAME_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")
# Claude Code appends notes of its own to what it sends the model, tool results too.
_SYSTEM_REMINDER = re.compile(r"\s*<system-reminder>.*?</system-reminder>\s*", re.DOTALL)


@dataclass(frozen=True)
class UseTool:
    """A `tool_use` block for any tool, by the name the model is offered."""

    name: str
    input: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CallTools:
    """Several tool calls in one assistant message."""

    calls: Sequence[CallTool | UseTool]


Step = CallTool | UseTool | CallTools | Reply | Fail


@dataclass(frozen=True)
class ToolResult:
    """One `tool_result` block the agent sent back; `text` is its text without the
    `<system-reminder>` notes Claude Code appends."""

    tool_use_id: str
    text: str
    is_error: bool


def mcp_tool_name(server: str, tool: str) -> str:
    """The name Claude Code gives an MCP tool: `mcp__<server>__<tool>`, each part with
    characters other than letters, digits, `_` and `-` replaced by `_`."""
    return f"{MCP_TOOL_PREFIX}{_NAME_UNSAFE.sub('_', server)}__{_NAME_UNSAFE.sub('_', tool)}"


class FakeAnthropic(ScriptedFake[Step]):
    """The fake Messages API server; use as a context manager."""

    thread_name = "m3-fake-anthropic"

    def __init__(self, script: Sequence[Step] = ()) -> None:
        super().__init__(script)
        # (method, path) of every request the fake had no answer for.
        self.unanswered: list[tuple[str, str]] = []

    @property
    def base_url(self) -> str:
        """The value for `ANTHROPIC_BASE_URL` (the CLI appends `/v1/messages`)."""
        return self.address

    def _default_step(self, body: Mapping[str, Any]) -> Step:
        results = tool_results(body)
        if results:
            return Reply("Done: " + " ".join(quoted_result(result.text) for result in results))
        for name in offered_tools(body):
            if name.startswith(MCP_TOOL_PREFIX):
                return UseTool(name)
        return Reply("I have no tool to call.")

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        return _handler(self)

    def _message(self, body: Mapping[str, Any], step: Step) -> dict[str, Any]:
        """The assistant message answering `body` with `step` (not `Fail`)."""
        n = self._next_id()
        content: list[dict[str, Any]]
        if isinstance(step, Reply):
            content = [{"type": "text", "text": step.text}]
        else:
            assert not isinstance(step, Fail)
            calls = step.calls if isinstance(step, CallTools) else (step,)
            content = [
                {
                    "type": "tool_use",
                    "id": f"toolu_fake_{n}_{index}",
                    "name": _tool_name(call),
                    "input": dict(call.arguments if isinstance(call, CallTool) else call.input),
                }
                for index, call in enumerate(calls)
            ]
        return {
            "id": f"msg_fake_{n}",
            "type": "message",
            "role": "assistant",
            "model": str(body.get("model") or FAKE_CLAUDE_MODEL),
            "content": content,
            "stop_reason": "tool_use" if content[0]["type"] == "tool_use" else "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": 10,
                "output_tokens": 5,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
        }


def _tool_name(call: CallTool | UseTool) -> str:
    if isinstance(call, CallTool):
        return mcp_tool_name(call.server, call.tool)
    return call.name


def stream_events(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The server-sent events that stream `message`: message_start, a start, a delta
    and a stop per content block, message_delta (stop reason, usage), message_stop."""
    usage = dict(message["usage"])
    events: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": {
                **message,
                "content": [],
                "stop_reason": None,
                "usage": {**usage, "output_tokens": 1},
            },
        }
    ]
    for index, block in enumerate(message["content"]):
        start: dict[str, Any]
        if block["type"] == "text":
            start = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            start = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events += [
            {"type": "content_block_start", "index": index, "content_block": start},
            {"type": "content_block_delta", "index": index, "delta": delta},
            {"type": "content_block_stop", "index": index},
        ]
    events += [
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": usage["output_tokens"]},
        },
        {"type": "message_stop"},
    ]
    return events


def offered_tools(body: Mapping[str, Any]) -> list[str]:
    """The names of the tools a request offered the model, in order."""
    return [
        str(tool.get("name"))
        for tool in body.get("tools") or ()
        if isinstance(tool, Mapping) and tool.get("name")
    ]


def tool_results(body: Mapping[str, Any]) -> list[ToolResult]:
    """The tool results in the request's last message (what the model received last)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return []
    last = messages[-1]
    if not isinstance(last, Mapping) or last.get("role") != "user":
        return []
    content = last.get("content")
    if not isinstance(content, list):
        return []
    return [
        ToolResult(
            tool_use_id=str(block.get("tool_use_id")),
            text=_text(block.get("content")),
            is_error=bool(block.get("is_error")),
        )
        for block in content
        if isinstance(block, Mapping) and block.get("type") == "tool_result"
    ]


def _text(content: Any) -> str:
    if isinstance(content, list):
        text = " ".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, Mapping) and part.get("type") == "text"
        )
    elif isinstance(content, str):
        text = content
    else:
        text = "" if content is None else json.dumps(content)
    return _SYSTEM_REMINDER.sub(" ", text).strip()


def _estimate_tokens(body: Mapping[str, Any]) -> int:
    return max(1, len(json.dumps(body)) // 4)


def _handler(model: FakeAnthropic) -> type[BaseHTTPRequestHandler]:
    class Handler(QuietHandler):
        def do_GET(self) -> None:
            self.send_json(200, {"data": [], "has_more": False, "first_id": None, "last_id": None})

        def do_POST(self) -> None:
            path = urlsplit(self.path).path.rstrip("/")
            if path not in ("/v1/messages", "/v1/messages/count_tokens"):
                model.unanswered.append((self.command, self.path))
                self._error(404, "not_found_error", f"no route {self.path}")
                return
            body = self.read_json()
            if body is None:
                return
            if path.endswith("/count_tokens"):
                self.send_json(200, {"input_tokens": _estimate_tokens(body)})
                return
            step = model._next_step(body)
            if isinstance(step, Fail):
                kind = "invalid_request_error" if step.status < 500 else "api_error"
                self._error(step.status, kind, step.message)
                return
            message = model._message(body, step)
            if body.get("stream"):
                self.send_events(stream_events(message))
            else:
                self.send_json(200, message)

        def _error(self, status: int, kind: str, message: str) -> None:
            self.send_json(status, {"type": "error", "error": {"type": kind, "message": message}})

    return Handler


__all__ = [
    "FAKE_ANTHROPIC_API_KEY",
    "FAKE_CLAUDE_MODEL",
    "CallTool",
    "CallTools",
    "Fail",
    "FakeAnthropic",
    "Reply",
    "Step",
    "ToolResult",
    "UseTool",
    "mcp_tool_name",
    "offered_tools",
    "stream_events",
    "tool_results",
]
