"""@modelcontextprotocol/server-everything (a 2025-11-25 server) as a real subprocess."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx2

from m3grpc.servers import StdioServer
from tests.support.mcp_processes import free_port
from tests.support.node import node_tools


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
    process = subprocess.Popen(
        [tools["M3_SYSTEM_NODE"], tools["M3_EVERYTHING_JS"], "streamableHttp"],
        env={**os.environ, "PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, "server-everything exited"
            try:
                httpx2.get(url, timeout=1)  # any HTTP answer means it is serving
                break
            except httpx2.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
