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

import itertools
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MCP_NAMESPACE_PREFIX = "mcp__"
# The model name a fake run uses; any name works, Codex passes it through.
FAKE_MODEL_NAME = "m3-fake-model"
# Codex sends the value of its provider's env_key as a bearer token; the fake
# accepts any, but a key must exist for Codex to start without a login.
FAKE_API_KEY = "m3-fake-model-key"


@dataclass(frozen=True)
class CallTool:
    server: str
    tool: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunCommand:
    command: str
    # Asking for escalation makes Codex's sandbox route the command through an approval.
    escalate: bool = True


@dataclass(frozen=True)
class Reply:
    text: str


@dataclass(frozen=True)
class Fail:
    status: int = 500
    message: str = "the fake model failed on purpose"


Step = CallTool | RunCommand | Reply | Fail


class FakeModel:
    """The fake model server; use as a context manager (`with FakeModel() as model:`)."""

    def __init__(self, script: Sequence[Step] = ()) -> None:
        self._script = list(script)
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self.requests: list[dict[str, Any]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """The provider base URL for Codex (`.../v1`)."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def start(self) -> FakeModel:
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="m3-fake-model", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> FakeModel:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def queue(self, *steps: Step) -> None:
        with self._lock:
            self._script.extend(steps)

    # -- one request ------------------------------------------------------------------

    def _next_step(self, body: dict[str, Any]) -> Step:
        with self._lock:
            self.requests.append(body)
            if self._script:
                return self._script.pop(0)
        output = _last_tool_output(body)
        if output is not None:
            return Reply(f"Done: {output}")
        tool = _first_mcp_tool(body)
        if tool is None:
            return Reply("I have no tool to call.")
        return CallTool(*tool)

    def _events(self, step: Step) -> list[dict[str, Any]]:
        n = next(self._ids)
        item: dict[str, Any]
        if isinstance(step, CallTool):
            item = {
                "type": "function_call",
                "id": f"fc_{n}",
                "call_id": f"call_{n}",
                "namespace": f"{MCP_NAMESPACE_PREFIX}{step.server}",
                "name": step.tool,
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
        return " ".join(
            str(part.get("text", "")) for part in output if isinstance(part, Mapping)
        ).strip()
    return json.dumps(output)


def _tool_text(output: str) -> str:
    """The tool's own text from Codex's function output.

    Codex wraps an MCP result as "Wall time: ...\nOutput:\n<result JSON>"; the
    text of a `{"result": "..."}` structured result is what a model would quote.
    """
    _, marker, rest = output.partition("Output:\n")
    text = rest if marker else output
    try:
        document = json.loads(text)
    except ValueError:
        return text.strip()
    if isinstance(document, Mapping) and isinstance(document.get("result"), str):
        return str(document["result"])
    if isinstance(document, list):
        return " ".join(
            str(part.get("text", "")) for part in document if isinstance(part, Mapping)
        ).strip()
    return text.strip()


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
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return None  # quiet: tests read `model.requests` instead

        def do_GET(self) -> None:
            # Codex may ask for the model list; an empty list is a valid answer.
            self._json(200, {"object": "list", "data": []})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._json(400, {"error": {"message": "invalid JSON"}})
                return
            if not self.path.rstrip("/").endswith("/responses"):
                self._json(404, {"error": {"message": f"no route {self.path}"}})
                return
            step = model._next_step(body)
            if isinstance(step, Fail):
                self._json(step.status, {"error": {"message": step.message, "type": "fake"}})
                return
            payload = b"".join(
                f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
                for event in model._events(step)
            )
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _json(self, status: int, document: Mapping[str, Any]) -> None:
            payload = json.dumps(document).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

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
