"""What a server binding offers: connect once, list its tools, disconnect.

For `ListServers`: a client discovers the configured servers' tools without
the repository. A server that cannot be reached, or whose listing fails, gives
a `ToolListing` with `failure_code` (`server_unavailable`, `protocol_mismatch`,
`mcp_error`, `timeout`) and a one-line `failure_message`, never an exception.
"""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
from mcp import Client, MCPError, StdioServerParameters
from mcp.client import Transport
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import Implementation, PaginatedRequestParams

from m3grpc.harness.diagnostics import StderrTail, connect_failure
from m3grpc.servers import ServerBinding, StdioServer, stdio_environment

logger = logging.getLogger(__name__)

CLIENT_INFO = Implementation(name="m3-discovery", version="0.1.0")
MRTR_PROTOCOL = "2026-07-28"
_METHOD_NOT_FOUND = -32601
_PAGE_LIMIT = 100
_HTTP_TIMEOUT_SECONDS = 30.0


@dataclass(frozen=True)
class ListedTool:
    name: str
    description: str
    title: str
    input_schema: dict[str, Any]


@dataclass(frozen=True)
class ToolListing:
    """A binding's tools, or why they could not be listed."""

    tools: list[ListedTool] = field(default_factory=list)
    protocol_version: str = ""
    failure_code: str | None = None
    failure_message: str | None = None


async def list_tools(server: ServerBinding, *, timeout: float) -> ToolListing:
    """Connect to `server`, list every tool (all pages), disconnect; at most
    `timeout` seconds in all."""
    stderr: StderrTail | None = None
    try:
        with anyio.fail_after(timeout):
            async with AsyncExitStack() as stack:
                target: StdioServerParameters | Transport
                if isinstance(server, StdioServer):
                    stderr = StderrTail(server.name)
                    target = stdio_client(
                        StdioServerParameters(
                            command=server.command,
                            args=list(server.args),
                            env=stdio_environment(server),
                            cwd=server.cwd,
                        ),
                        errlog=stderr.errlog,
                    )
                else:
                    http = httpx2.AsyncClient(
                        headers=dict(server.headers),
                        timeout=httpx2.Timeout(_HTTP_TIMEOUT_SECONDS, read=None),
                    )
                    await stack.enter_async_context(http)
                    target = streamable_http_client(server.url, http_client=http)
                client = Client(
                    target,
                    mode="auto" if server.protocol == MRTR_PROTOCOL else server.protocol,
                    client_info=CLIENT_INFO,
                    cache=None,
                )
                try:
                    entered = await stack.enter_async_context(client)
                finally:
                    if stderr is not None:
                        stderr.release_writer()
                version = str(entered.protocol_version or "")
                if server.protocol == MRTR_PROTOCOL and version != MRTR_PROTOCOL:
                    return ToolListing(
                        protocol_version=version,
                        failure_code="protocol_mismatch",
                        failure_message=(
                            f"binding {server.name!r} is pinned to MCP protocol "
                            f"{MRTR_PROTOCOL}, but the server offered {version}"
                        ),
                    )
                try:
                    tools = await _all_tools(entered)
                except MCPError as exc:
                    return ToolListing(
                        protocol_version=version,
                        failure_code="mcp_error",
                        failure_message=f"MCP error {exc.code}: {exc.message}",
                    )
                return ToolListing(tools=tools, protocol_version=version)
    except TimeoutError:
        return ToolListing(
            failure_code="timeout",
            failure_message=f"MCP server {server.name!r} did not list its tools in {timeout} s",
        )
    except Exception as exc:  # spawn, network and handshake failures alike
        logger.info(
            "cannot list the tools of MCP server %r: %s",
            server.name,
            connect_failure(server, exc, None),
        )
        logger.debug("listing the tools of MCP server %r failed", server.name, exc_info=True)
        tail = await stderr.drained() if stderr is not None else None
        return ToolListing(
            failure_code="server_unavailable", failure_message=connect_failure(server, exc, tail)
        )


async def _all_tools(client: Client) -> list[ListedTool]:
    tools: list[ListedTool] = []
    cursor: str | None = None
    try:
        for _ in range(_PAGE_LIMIT):
            params = PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await client.session.list_tools(params=params)
            tools.extend(
                ListedTool(
                    name=tool.name,
                    description=tool.description or "",
                    title=tool.title or "",
                    input_schema=dict(tool.input_schema or {}),
                )
                for tool in page.tools
            )
            if (cursor := page.next_cursor) is None:
                break
    except MCPError as exc:
        if exc.code != _METHOD_NOT_FOUND:
            raise
    return tools
