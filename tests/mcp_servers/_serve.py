"""Command line shared by the test MCP servers (not a server itself).

    python tests/mcp_servers/<server>.py [--variant legacy|mrtr] [--http --port N] [--pid-file F]

- `--variant legacy` elicits mid-call with `ctx.elicit`/`ctx.elicit_url`. Over
  stdio it serves only the `initialize` handshake, like a pre-2026-07-28
  server, so an "auto" client falls back to the legacy protocol. Over HTTP the
  SDK always also serves 2026-07-28, so bind it with `protocol="legacy"`.
- `--variant mrtr` asks through 2026-07-28 `InputRequiredResult`s (SDK
  resolvers or hand-built results); it serves both protocol generations.
- `--pid-file` records the server's process id, so tests can check it exited.
- `--state-ttl S` makes MRTR `request_state` expire after S seconds (SDK default 600).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.request_state import RequestStateSecurity
from mcp.server.runner import serve_loop
from mcp.server.stdio import stdio_server

Variant = Literal["legacy", "mrtr"]


async def _serve_handshake_only(server: MCPServer[Any]) -> None:
    # MCPServer.run() serves both protocol generations over stdio; serve_loop is
    # the SDK's handshake-only loop (the private attribute is the only way to it).
    lowlevel = server._lowlevel_server
    async with stdio_server() as (read_stream, write_stream), lowlevel.lifespan(lowlevel) as state:
        await serve_loop(
            lowlevel,
            read_stream,
            write_stream,
            lifespan_state=state,
            init_options=lowlevel.create_initialization_options(),
        )


def main(build: Callable[[Variant, RequestStateSecurity | None], MCPServer[Any]]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--variant", choices=["legacy", "mrtr"], default="legacy")
    parser.add_argument("--http", action="store_true", help="serve Streamable HTTP at /mcp")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--pid-file", type=Path)
    parser.add_argument("--state-ttl", type=float)
    args = parser.parse_args()
    if args.pid_file is not None:
        args.pid_file.write_text(str(os.getpid()))
    security = None
    if args.state_ttl is not None:
        security = RequestStateSecurity.ephemeral(ttl=args.state_ttl)
    server = build(args.variant, security)
    if args.http:
        server.run("streamable-http", host="127.0.0.1", port=args.port)
    elif args.variant == "legacy":
        anyio.run(_serve_handshake_only, server)
    else:
        server.run("stdio")
