"""Test MCP server for tests/harness/test_contained_session.py: a legacy (stateful)
Streamable HTTP server that records what reaches it over HTTP.

    python tests/harness/legacy_session_server.py --port N

Every HTTP request to /mcp is recorded (method, `Mcp-Session-Id`, `MCP-Protocol-Version`,
the JSON-RPC method or answered id of a POST); `GET /journal` returns the records and the
tools' own notes as JSON.

Tools:
- `survey`: asks the client for its roots (on the session's GET stream), notifies that
  its tools changed (GET stream), reports progress on the call's stream, asks for an
  address (`elicitation/create` on the call's stream) and returns
  "roots <n>; <street>, <city>".
- `block`: notes "block started", then waits; cancelled, it notes "block cancelled".
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import anyio
import mcp_types as t
import uvicorn
from mcp.server.elicitation import AcceptedElicitation
from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel
from starlette.types import ASGIApp, Message, Receive, Scope, Send

RECORDS: list[dict[str, Any]] = []
NOTES: list[str] = []
# A bound on `block`'s wait, so that a forgotten server cannot hang for long.
BLOCK_LIMIT_SECONDS = 120
# How long `survey` waits for the session's GET stream before asking on it anyway.
GET_STREAM_WAIT_SECONDS = 30


class Address(BaseModel):
    street: str
    city: str


def build() -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer("legacy_session", log_level="WARNING")

    @server.tool()
    async def survey(ctx: Context) -> str:
        # A request of the server's own goes on the session's GET stream, and the SDK
        # drops it if that stream is not open yet (no event store): the client opens
        # it beside its first requests, so wait until it has arrived.
        await get_stream_arrived()
        roots = await ctx.session.list_roots()
        await ctx.session.send_notification(t.ToolListChangedNotification())
        await ctx.report_progress(1, 2, "asking")
        answer = await ctx.elicit("Where to?", Address)
        if not isinstance(answer, AcceptedElicitation):
            return f"roots {len(roots.roots)}; {answer.action}"
        return f"roots {len(roots.roots)}; {answer.data.street}, {answer.data.city}"

    @server.tool()
    async def block() -> str:
        NOTES.append("block started")
        try:
            await anyio.sleep(BLOCK_LIMIT_SECONDS)
        except anyio.get_cancelled_exc_class():
            NOTES.append("block cancelled")
            raise
        return "not cancelled"

    return server


async def get_stream_arrived() -> None:
    """Until a session's GET (its stream) has reached the server, bounded; then a moment
    for the server to attach it."""
    with anyio.move_on_after(GET_STREAM_WAIT_SECONDS):
        while not any(r["http"] == "GET" and r["session"] for r in RECORDS):
            await anyio.sleep(0.01)
    await anyio.sleep(0.1)


class Journal:
    """ASGI middleware: records each request to the MCP endpoint; serves /journal."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        if scope["path"] == "/journal":
            body = json.dumps({"records": RECORDS, "notes": NOTES}).encode()
            headers = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        record: dict[str, Any] = {
            "http": scope["method"],
            "session": headers.get("mcp-session-id"),
            "version": headers.get("mcp-protocol-version"),
        }
        RECORDS.append(record)
        chunks: list[bytes] = []

        async def recording_receive() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False) and chunks[0]:
                    parsed = json.loads(b"".join(chunks))
                    record["rpc"] = parsed.get("method") or f"answer {parsed.get('id')}"
            return message

        await self._app(scope, recording_receive, send)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    app = Journal(build().streamable_http_app())
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
