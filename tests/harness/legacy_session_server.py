"""Test MCP server for tests/harness/test_contained_session.py: a legacy (stateful)
Streamable HTTP server that records what reaches it over HTTP.

    python tests/harness/legacy_session_server.py --port N [--get serve|late|refuse|hold]

`--get` is how the session's GET (its stream) is answered: `serve` at once (the
default), `late` after `GET_LATE_SECONDS` (so a client that sends its requests beside
the GET gets them served before the stream is attached), `refuse` with 405 (no GET
stream; every GET, with a session or not), `hold` never (until the client goes).

Every HTTP request to /mcp is recorded (method, `Mcp-Session-Id`, `MCP-Protocol-Version`,
the JSON-RPC method or answered id of a POST); `GET /journal` returns the records and the
tools' own notes as JSON.

Tools:
- `survey`: asks the client for its roots (on the session's GET stream), notifies that
  its tools changed (GET stream), reports progress on the call's stream, asks for an
  address (`elicitation/create` on the call's stream) and returns
  "roots <n>; <street>, <city>".
- `address`: asks for an address on the call's stream only and returns
  "<street>, <city>".
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
# How long `--get late` holds a session's GET before serving it.
GET_LATE_SECONDS = 0.5


class Address(BaseModel):
    street: str
    city: str


def build() -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer("legacy_session", log_level="WARNING")

    @server.tool()
    async def survey(ctx: Context) -> str:
        # At once: a request of the server's own goes on the session's GET stream, and
        # the SDK drops it if no stream is attached yet (no event store).
        roots = await ctx.session.list_roots()
        await ctx.session.send_notification(t.ToolListChangedNotification())
        await ctx.report_progress(1, 2, "asking")
        answer = await ctx.elicit("Where to?", Address)
        if not isinstance(answer, AcceptedElicitation):
            return f"roots {len(roots.roots)}; {answer.action}"
        return f"roots {len(roots.roots)}; {answer.data.street}, {answer.data.city}"

    @server.tool()
    async def address(ctx: Context) -> str:
        answer = await ctx.elicit("Where to?", Address)
        if not isinstance(answer, AcceptedElicitation):
            return answer.action
        return f"{answer.data.street}, {answer.data.city}"

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


class Journal:
    """ASGI middleware: records each request to the MCP endpoint; serves /journal;
    answers GETs as `get` says (see the module doc)."""

    def __init__(self, app: ASGIApp, get: str) -> None:
        self._app = app
        self._get = get

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
        if scope["method"] == "GET":
            if self._get == "refuse":
                start = {"type": "http.response.start", "status": 405, "headers": []}
                await send(start)
                await send({"type": "http.response.body", "body": b""})
                return
            if self._get == "late" and record["session"]:
                await anyio.sleep(GET_LATE_SECONDS)
            if self._get == "hold" and record["session"]:
                while (await receive())["type"] != "http.disconnect":
                    pass
                return
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
    parser.add_argument("--get", choices=["serve", "late", "refuse", "hold"], default="serve")
    args = parser.parse_args()
    app = Journal(build().streamable_http_app(), args.get)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
