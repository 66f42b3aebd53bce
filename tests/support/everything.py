"""@modelcontextprotocol/server-everything (a 2025-11-25 server) as a real subprocess."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

from m3grpc.servers import HttpServer, ServerBinding, StdioServer
from tests.support.mcp_processes import free_port, serve_http
from tests.support.node import node_tools

Transport = Literal["stdio", "http"]
# A valid answer to the 13-field form of its `trigger-elicitation-request` tool.
VALID_ANSWER = {
    "name": "Ada Lovelace",
    "check": True,
    "email": "ada@example.org",
    "homepage": "https://example.org/ada",
    "birthdate": "1815-12-10",
    "integer": 7,
    "number": 2.5,
    "untitledSingleSelectEnum": "Joey",
    "untitledMultipleSelectEnum": ["Piano"],
    "titledSingleSelectEnum": "hero-2",
    "titledMultipleSelectEnum": ["fish-3"],
    "legacyTitledEnum": "pet-2",
}
TRANSPORTS: tuple[Transport, ...] = ("stdio", "http")


def everything_stdio(name: str = "everything", **fields: object) -> StdioServer:
    """A binding that launches server-everything over stdio."""
    tools = node_tools()
    return StdioServer.model_validate(
        {
            "name": name,
            "command": tools["M3_SYSTEM_NODE"],
            "args": (tools["M3_EVERYTHING_JS"], "stdio"),
            **fields,
        }
    )


@contextmanager
def everything_http() -> Iterator[str]:
    """Serve server-everything over Streamable HTTP on loopback; yields its URL."""
    tools = node_tools()
    port = free_port()
    command = [tools["M3_SYSTEM_NODE"], tools["M3_EVERYTHING_JS"], "streamableHttp"]
    with serve_http(command, port, env={"PORT": str(port)}) as url:
        yield url


@contextmanager
def everything_binding(transport: Transport, name: str = "everything") -> Iterator[ServerBinding]:
    """A binding named `name` for server-everything over `transport` (for HTTP, served
    for as long as the block runs)."""
    if transport == "stdio":
        yield everything_stdio(name)
        return
    with everything_http() as url:
        yield HttpServer(name=name, url=url)
