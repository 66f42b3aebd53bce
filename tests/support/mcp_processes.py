"""Start the test MCP servers of tests/mcp_servers/ as real subprocesses."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx2

MCP_SERVERS = Path(__file__).resolve().parents[1] / "mcp_servers"


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (bound and released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def serve_http(
    command: Sequence[str], port: int, *, env: Mapping[str, str] | None = None
) -> Iterator[str]:
    """Run `command` (an MCP server listening on `port` over Streamable HTTP) until
    it answers on loopback; yield its URL; stop it afterwards."""
    process = subprocess.Popen(
        list(command),
        env=None if env is None else {**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        # A bound, not a timing check: a Python start-up on a loaded machine (the suite
        # runs in parallel workers) can take tens of seconds.
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, f"the HTTP test server exited: {command}"
            try:
                httpx2.get(url, timeout=1)  # any HTTP answer means it is serving
                break
            except httpx2.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def http_mcp_server(name: str = "shipping", variant: str = "legacy") -> Iterator[str]:
    """Serve tests/mcp_servers/<name>.py over Streamable HTTP on loopback; yields its URL."""
    port = free_port()
    command = [sys.executable, str(MCP_SERVERS / f"{name}.py"), "--variant", variant]
    with serve_http([*command, "--http", "--port", str(port)], port) as url:
        yield url
