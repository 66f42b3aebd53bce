"""`m3grpc health`: exit 0 and SERVING from a running server (tests/docker runs it
against the entrypoint's server); exit 1 with one line when nothing answers."""

from __future__ import annotations

import os
import socket

from tests.ops.conftest import m3grpc


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_nothing_listening_is_unhealthy() -> None:
    port = _closed_port()
    done = m3grpc("health", "--server", f"127.0.0.1:{port}", "--timeout", "3")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip() == f"m3grpc: health check of 127.0.0.1:{port} failed: UNAVAILABLE"


def test_the_address_defaults_to_the_served_port() -> None:
    # The image's HEALTHCHECK passes no --server: M3_LISTEN's port on loopback is probed.
    port = _closed_port()
    env = {**os.environ, "M3_LISTEN": f"0.0.0.0:{port}"}
    env.pop("M3_SERVER", None)
    done = m3grpc("health", "--timeout", "3", env=env)
    assert f"127.0.0.1:{port}" in done.stderr and done.returncode == 1


def test_an_unreadable_tls_file_is_one_line() -> None:
    port = _closed_port()
    env = {**os.environ, "M3_TLS_CA": "/nonexistent/ca.pem"}
    done = m3grpc("health", "--server", f"127.0.0.1:{port}", "--timeout", "3", env=env)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip() == (
        f"m3grpc: health check of 127.0.0.1:{port}: cannot read /nonexistent/ca.pem: "
        "No such file or directory"
    )
