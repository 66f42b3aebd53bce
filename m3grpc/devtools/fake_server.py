"""What the FAKE hosted-model servers share: scripted steps, a loopback HTTP server, a record.

`fake_model` (OpenAI Responses API, for Codex) and `fake_anthropic` (Anthropic
Messages API, for Claude Code) both stand in for a hosted LLM and nothing else.
Each plays a script: a queue of steps, one per model request, and a default
behaviour ("call the first offered MCP tool, then quote its result") when the
queue is empty. This module holds the parts that do not depend on the API: the
steps every fake understands, the server thread, the request record, and the
HTTP answer helpers (JSON, server-sent events).
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Generic, Self, TypeVar


@dataclass(frozen=True)
class CallTool:
    """A call of MCP tool `tool` of server `server` (whether or not the agent offered it)."""

    server: str
    tool: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Reply:
    """A final message: the model's turn ends with this text."""

    text: str


@dataclass(frozen=True)
class Fail:
    """An HTTP error response instead of a model answer."""

    status: int = 500
    message: str = "the fake model failed on purpose"


def quoted_result(output: str) -> str:
    """What the default behaviour quotes of a tool's output: the string of a
    `{"result": "..."}` structured result (both agents pass structured content on as
    JSON), else the output's text blocks when it is a JSON list of them, else the
    output itself."""
    try:
        document = json.loads(output)
    except ValueError:
        return output.strip()
    if isinstance(document, Mapping) and isinstance(document.get("result"), str):
        return str(document["result"])
    if isinstance(document, list):
        return " ".join(
            str(part.get("text", "")) for part in document if isinstance(part, Mapping)
        ).strip()
    return output.strip()


S = TypeVar("S")


class ScriptedFake(Generic[S]):
    """A loopback HTTP server that answers model requests from a script of steps `S`.

    Subclasses give the request handler (`_handler_class`) and the step taken when
    the script is empty (`_default_step`). Use as a context manager.
    """

    thread_name = "m3-fake-model"

    def __init__(self, script: Sequence[S] = ()) -> None:
        self._script: list[S] = list(script)
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        # The body of every model request, in arrival order.
        self.requests: list[dict[str, Any]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        """`http://127.0.0.1:PORT`, the server's root."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> Self:
        self._thread = threading.Thread(
            target=self._server.serve_forever, name=self.thread_name, daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def queue(self, *steps: S) -> None:
        """Append steps to the script."""
        with self._lock:
            self._script.extend(steps)

    def _next_step(self, body: dict[str, Any]) -> S:
        """Record a model request and take its step: the script's next, else the default."""
        with self._lock:
            self.requests.append(body)
            if self._script:
                return self._script.pop(0)
        return self._default_step(body)

    def _next_id(self) -> int:
        return next(self._ids)

    def _default_step(self, body: Mapping[str, Any]) -> S:
        raise NotImplementedError

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler with the fakes' answer helpers; logs nothing (tests read records)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def read_json(self) -> dict[str, Any] | None:
        """The request body as a JSON object; None (after a 400 answer) when it is not one."""
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = None
        if not isinstance(body, dict):
            self.send_json(400, {"error": {"message": "the body is not a JSON object"}})
            return None
        return body

    def send_json(self, status: int, document: Mapping[str, Any]) -> None:
        self._send(status, "application/json", json.dumps(document).encode())

    def send_events(self, events: Iterable[Mapping[str, Any]]) -> None:
        """Server-sent events, one per mapping, named by its `type`."""
        payload = b"".join(
            f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode() for event in events
        )
        self._send(200, "text/event-stream", payload)

    def _send(self, status: int, content_type: str, payload: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


__all__ = ["CallTool", "Fail", "QuietHandler", "Reply", "ScriptedFake", "quoted_result"]
