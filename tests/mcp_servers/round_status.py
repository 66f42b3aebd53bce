"""Test MCP server "round_status": servers that misbehave around an answer.

    python tests/mcp_servers/round_status.py --variant legacy|mrtr
    python tests/mcp_servers/round_status.py --http --port N --hold-close DIR

Tools (legacy: `elicitation/create` mid-call; mrtr: only `nested_form`):

- `nested_form`: asks with a schema whose property `address` is a nested
  object, which MCP form elicitation does not allow.
- `exit_after_answer`: asks for a `ShippingAddress`, then exits the process as
  soon as the answer arrives (the tool never returns).
- `hold_after_answer(marker_dir)`: asks for a `ShippingAddress`, writes
  `<marker_dir>/answered`, then returns only once `<marker_dir>/release` exists.
- `ask_address`: asks for a `ShippingAddress` and returns "booked shipment to
  <street>, <city>".
- `hold(marker_dir)`: no input; writes `<marker_dir>/holding`, then returns once
  `<marker_dir>/release` exists.

`--hold-close DIR` (HTTP only): a client's session DELETE (sent when it closes
the connection) writes `DIR/closing` and is answered only once `DIR/release`
exists, so a test can act while the client is still tearing the session down.
Every wait is bounded (`HOLD_LIMIT_SECONDS`), so a forgotten release cannot
leave a process behind for long.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as t
import uvicorn
from _serve import _serve_handshake_only
from mcp.server.mcpserver import Context, MCPServer
from shipping import ShippingAddress, booked
from starlette.types import ASGIApp, Receive, Scope, Send

HOLD_LIMIT_SECONDS = 120.0
NESTED_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "address": {
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "required": ["address"],
}


async def wait_for_release(marker_dir: Path) -> None:
    with anyio.move_on_after(HOLD_LIMIT_SECONDS):
        while not (marker_dir / "release").exists():
            await anyio.sleep(0.02)


def add_legacy(server: MCPServer[Any]) -> None:

    @server.tool()
    async def nested_form(ctx: Context) -> str:
        session = ctx.request_context.session
        result = await session.elicit_form(
            "Where should the shipment go?", NESTED_SCHEMA, related_request_id=ctx.request_id
        )
        return f"answered {result.action}"

    @server.tool()
    async def exit_after_answer(ctx: Context) -> str:
        await ctx.elicit("Where should the shipment go?", ShippingAddress)
        sys.stdout.flush()
        os._exit(0)  # the answer arrived; the call never completes

    @server.tool()
    async def hold_after_answer(ctx: Context, marker_dir: str) -> str:
        result = await ctx.elicit("Where should the shipment go?", ShippingAddress)
        (Path(marker_dir) / "answered").write_text("answered")
        await wait_for_release(Path(marker_dir))
        return booked(result)

    @server.tool()
    async def ask_address(ctx: Context) -> str:
        return booked(await ctx.elicit("Where should the shipment go?", ShippingAddress))

    @server.tool()
    async def hold(marker_dir: str) -> str:
        (Path(marker_dir) / "holding").write_text("holding")
        await wait_for_release(Path(marker_dir))
        return "released"


def add_mrtr(server: MCPServer[Any]) -> None:

    @server.tool()
    async def nested_form(ctx: Context) -> str | t.InputRequiredResult:
        params = t.ElicitRequestFormParams(
            message="Where should the shipment go?", requested_schema=NESTED_SCHEMA
        )
        return t.InputRequiredResult(
            input_requests={"shipping_address": t.ElicitRequest(params=params)},
            request_state="nested",
        )


class HoldClose:
    """ASGI middleware: a session DELETE waits for `<directory>/release`."""

    def __init__(self, app: ASGIApp, directory: Path) -> None:
        self._app = app
        self._directory = directory

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "DELETE":
            (self._directory / "closing").write_text("closing")
            await wait_for_release(self._directory)
        await self._app(scope, receive, send)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--variant", choices=["legacy", "mrtr"], default="legacy")
    parser.add_argument("--http", action="store_true", help="serve Streamable HTTP at /mcp")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--hold-close", type=Path)
    args = parser.parse_args()
    server: MCPServer[Any] = MCPServer("round_status", log_level="WARNING")
    if args.variant == "legacy":
        add_legacy(server)
    else:
        add_mrtr(server)
    if args.http:
        app: ASGIApp = server.streamable_http_app()
        if args.hold_close is not None:
            app = HoldClose(app, args.hold_close)
        uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")
    elif args.variant == "legacy":
        anyio.run(_serve_handshake_only, server)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
