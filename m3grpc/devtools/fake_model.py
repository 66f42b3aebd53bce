"""A FAKE hosted model: a loopback HTTP server speaking the OpenAI Responses API (SSE).

It stands in for the hosted LLM and nothing else, so that the real `codex
app-server` can run against real MCP servers in tests and in `m3grpc demo
--harness codex` without a network or an account. It is not a model: it plays
a script.

Default behaviour, per `POST /v1/responses` request (Codex sends the whole
conversation every time):

- the last input item is not a tool output: call the first MCP tool Codex
  offers (a function inside a `namespace` tool named `mcp__<server>`), with
  arguments `{}`;
- the last input item is a tool output: answer with a final message quoting
  that output: `Done: <output>`.

A test can queue explicit steps (`FakeModel(script=[...])`); each request takes
the next step, and the default behaviour resumes when the script runs out:

- `CallTool(server, tool, arguments)`: a function call to `mcp__<server>` /
  `<tool>` (whether or not Codex offered that tool);
- `RunCommand(command)`: a call to Codex's native shell tool (`exec_command`),
  which needs approval under Codex's read-only sandbox when it asks to escalate;
- `Reply(text)`: a final message;
- `Fail(status)`: an HTTP error response (Codex retries 5xx a few times).

`FakeModel.requests` records every request body, so a test can read the tool
list Codex sent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from m3grpc.devtools.fake_server import (
    CallTool,
    Fail,
    QuietHandler,
    Reply,
    ScriptedFake,
    quoted_result,
)

MCP_NAMESPACE_PREFIX = "mcp__"
# The model name a fake run uses; any name works, Codex passes it through.
FAKE_MODEL_NAME = "m3-fake-model"
# Codex sends the value of its provider's env_key as a bearer token; the fake
# accepts any, but a key must exist for Codex to start without a login.
FAKE_API_KEY = "m3-fake-model-key"


@dataclass(frozen=True)
class RunCommand:
    command: str
    # Asking for escalation makes Codex's sandbox route the command through an approval.
    escalate: bool = True


Step = CallTool | RunCommand | Reply | Fail


class FakeModel(ScriptedFake[Step]):
    """The fake model server; use as a context manager (`with FakeModel() as model:`)."""

    @property
    def base_url(self) -> str:
        """The provider base URL for Codex (`.../v1`)."""
        return f"{self.address}/v1"

    # -- one request ------------------------------------------------------------------

    def _default_step(self, body: Mapping[str, Any]) -> Step:
        output = _last_tool_output(body)
        if output is not None:
            return Reply(f"Done: {output}")
        tool = _first_mcp_tool(body)
        if tool is None:
            return Reply("I have no tool to call.")
        return CallTool(*tool)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        return _handler(self)

    def _events(self, step: Step, body: Mapping[str, Any]) -> list[dict[str, Any]]:
        n = self._next_id()
        item: dict[str, Any]
        if isinstance(step, CallTool):
            item = {
                "type": "function_call",
                "id": f"fc_{n}",
                "call_id": f"call_{n}",
                "namespace": f"{MCP_NAMESPACE_PREFIX}{step.server}",
                "name": _offered_name(body, step.server, step.tool),
                "arguments": json.dumps(dict(step.arguments)),
            }
        elif isinstance(step, RunCommand):
            arguments: dict[str, Any] = {"cmd": step.command}
            if step.escalate:
                arguments.update(
                    sandbox_permissions="require_escalated",
                    justification="the test asks for an approval",
                )
            item = {
                "type": "function_call",
                "id": f"fc_{n}",
                "call_id": f"call_{n}",
                "name": "exec_command",
                "arguments": json.dumps(arguments),
            }
        else:
            assert isinstance(step, Reply)
            item = {
                "type": "message",
                "id": f"msg_{n}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": step.text, "annotations": []}],
            }
        response_id = f"resp_{n}"
        usage = {
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 5,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 15,
        }
        return [
            {"type": "response.created", "response": {"id": response_id}},
            {"type": "response.output_item.done", "output_index": 0, "item": item},
            {"type": "response.completed", "response": {"id": response_id, "usage": usage}},
        ]


def _last_tool_output(body: Mapping[str, Any]) -> str | None:
    items = body.get("input")
    if not isinstance(items, list) or not items:
        return None
    last = items[-1]
    if not isinstance(last, Mapping) or last.get("type") != "function_call_output":
        return None
    output = last.get("output")
    if isinstance(output, str):
        return _tool_text(output)
    if isinstance(output, list):  # content items
        return _tool_text(
            "\n".join(str(part.get("text", "")) for part in output if isinstance(part, Mapping))
        )
    return json.dumps(output)


def _tool_text(output: str) -> str:
    """The tool's own text from Codex's function output.

    Codex wraps an MCP result as "Wall time: ...\nOutput:\n<result JSON>" (a
    structured result), or as content items whose first is "Wall time: ...\nOutput:"."""
    _, marker, rest = output.partition("Output:")
    return quoted_result(rest if marker else output)


def _offered_name(body: Mapping[str, Any], server: str, tool: str) -> str:
    """The name under which Codex offered MCP tool `tool` of `server` (Codex rewrites
    characters a function name may not have, e.g. `-`), else `tool` as given (a call of
    a tool it did not offer)."""
    wanted = re.sub(r"[^A-Za-z0-9_]", "_", tool)
    for name in offered_tools(body):
        namespace, _, offered = name.partition("/")
        if namespace == f"{MCP_NAMESPACE_PREFIX}{server}" and offered in (tool, wanted):
            return offered
    return tool


def _first_mcp_tool(body: Mapping[str, Any]) -> tuple[str, str] | None:
    for tool in body.get("tools") or ():
        if not isinstance(tool, Mapping) or tool.get("type") != "namespace":
            continue
        name = str(tool.get("name", ""))
        if not name.startswith(MCP_NAMESPACE_PREFIX):
            continue
        for inner in tool.get("tools") or ():
            if isinstance(inner, Mapping) and inner.get("name"):
                return name.removeprefix(MCP_NAMESPACE_PREFIX), str(inner["name"])
    return None


def offered_tools(body: Mapping[str, Any]) -> list[str]:
    """The tool names a request offered the model (`mcp__<server>/<tool>` for MCP tools)."""
    names: list[str] = []
    for tool in body.get("tools") or ():
        if not isinstance(tool, Mapping):
            continue
        if tool.get("type") == "namespace":
            names.extend(
                f"{tool.get('name')}/{inner.get('name')}"
                for inner in tool.get("tools") or ()
                if isinstance(inner, Mapping)
            )
        else:
            names.append(str(tool.get("name", tool.get("type"))))
    return names


def _handler(model: FakeModel) -> type[BaseHTTPRequestHandler]:
    class Handler(QuietHandler):
        def do_GET(self) -> None:
            # Codex may ask for the model list; an empty list is a valid answer.
            self.send_json(200, {"object": "list", "data": []})

        def do_POST(self) -> None:
            body = self.read_json()
            if body is None:
                return
            if not self.path.rstrip("/").endswith("/responses"):
                self.send_json(404, {"error": {"message": f"no route {self.path}"}})
                return
            step = model._next_step(body)
            if isinstance(step, Fail):
                self.send_json(step.status, {"error": {"message": step.message, "type": "fake"}})
                return
            self.send_events(model._events(step, body))

    return Handler


__all__ = [
    "FAKE_API_KEY",
    "FAKE_MODEL_NAME",
    "CallTool",
    "Fail",
    "FakeModel",
    "Reply",
    "RunCommand",
    "Step",
    "offered_tools",
]
