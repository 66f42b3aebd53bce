"""Test MCP server "catalog": a tool listing that counts its requests and can grow.

    python tests/mcp_servers/catalog.py --port N [--tools-ttl-ms MS]

Streamable HTTP only (both protocol generations, as the SDK serves them).
`--tools-ttl-ms MS` marks every `tools/list` result fresh for MS milliseconds
(2026-07-28 `ttlMs`, the SDK's `cache_hints`); without it results carry no hint.

Tools (no input asked):
- `listings`: how many `tools/list` requests the server has answered, as text.
- `add_extra`: adds the tool `extra` to the listing; "added".
- `extra` (once added): "extra ran".
"""

from __future__ import annotations

import argparse
from typing import Any

import mcp_types as t
from mcp.server import CacheHint
from mcp.server.mcpserver import MCPServer


class CountingServer(MCPServer[Any]):
    """An `MCPServer` that counts the `tools/list` requests it answers."""

    listed = 0

    async def list_tools(self) -> list[t.Tool]:
        CountingServer.listed += 1
        return await super().list_tools()


def build(tools_ttl_ms: int | None) -> MCPServer[Any]:
    hints = None if tools_ttl_ms is None else {"tools/list": CacheHint(ttl_ms=tools_ttl_ms)}
    server = CountingServer("catalog", log_level="WARNING", cache_hints=hints)

    @server.tool()
    def listings() -> str:
        return str(CountingServer.listed)

    @server.tool()
    def add_extra() -> str:
        def extra() -> str:
            return "extra ran"

        server.add_tool(extra)
        return "added"

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tools-ttl-ms", type=int)
    args = parser.parse_args()
    build(args.tools_ttl_ms).run("streamable-http", host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
