"""A binding whose MCP server cannot be reached fails its execution with a
message an operator can act on: the server's own last stderr lines (stdio),
"command not found", or "could not reach URL" with the cause, and never
Python internals such as `ExceptionGroup(...)` or `FileNotFoundError(2, ...)`.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator

import pytest

from m3grpc.wire.gen.m3.v1 import execution_pb2
from tests.api.conftest import ServerProcess, Stubs, add_servers, running, write_config

# What a server started in an environment without its SDK prints before exiting 1.
MISSING_MODULE = "ModuleNotFoundError: No module named 'mcp'"
NOISE_LINES = 200  # far more stderr than a failure message may carry

BROKEN_SERVER = f"""
import sys
for n in range({NOISE_LINES}):
    print(f"noise line {{n}}", file=sys.stderr)
print("Traceback (most recent call last):", file=sys.stderr)
print('  File "server.py", line 1, in <module>', file=sys.stderr)
print({MISSING_MODULE!r}, file=sys.stderr)
sys.exit(1)
"""

# A working MCP server whose tool kills the process after saying why on stderr.
CRASH_REASON = "fatal: the shipping ledger is corrupt"
CRASHING_SERVER = f"""
import os
import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("crashing")


@server.tool()
def book_shipment() -> str:
    print({CRASH_REASON!r}, file=sys.stderr, flush=True)
    os._exit(3)


server.run()
"""

INTERNALS = ("ExceptionGroup", "FileNotFoundError(", "ConnectError(", "McpError(", "MCPError(")


def closed_port() -> int:
    """A loopback port nothing listens on (bound once by the OS, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("broken-bindings")
    script = tmp / "broken_server.py"
    script.write_text(BROKEN_SERVER)
    crashing = tmp / "crashing_server.py"
    crashing.write_text(CRASHING_SERVER)
    config = write_config(tmp / "m3.toml", tmp / "m3.sqlite")
    missing = tmp / "no-such-directory" / "no-such-mcp-server"
    bindings = {
        "broken": {"command": sys.executable, "args": [str(script)]},
        "missing": {"command": str(missing)},
        "closed": {"url": f"http://127.0.0.1:{closed_port()}/mcp"},
        "crashing": {"command": sys.executable, "args": [str(crashing)]},
        "nowhere": {"command": sys.executable, "cwd": str(tmp / "no-such-directory")},
    }
    add_servers(config, bindings)
    yield from running(ServerProcess(config, tmp / "server.log").start())


def failed_operation(
    stubs: Stubs, binding: str, code: str = "server_unavailable"
) -> execution_pb2.OperationResult:
    result = stubs.result(stubs.submit_managed(server=binding))
    assert result.outcome == execution_pb2.EXECUTION_OUTCOME_FAILED, result
    assert len(result.operations) == 1, result
    operation = result.operations[0]
    assert not operation.ok
    assert operation.failure_code == code, operation
    for internal in INTERNALS:
        assert internal not in operation.failure_message, operation.failure_message
        assert internal not in result.failure_message, result.failure_message
    return operation


def test_stdio_server_that_exits_reports_its_last_stderr_lines(stubs: Stubs) -> None:
    message = failed_operation(stubs, "broken").failure_message
    assert MISSING_MODULE in message, message
    assert "before the MCP handshake" in message and "stderr" in message, message
    # Bounded: the last lines, not the server's whole stderr.
    assert f"noise line {NOISE_LINES - 1}" in message, message
    assert "noise line 0\n" not in message and not message.startswith("noise line 0"), message
    assert message.count("noise line") < 20, message


def test_stdio_command_not_found(stubs: Stubs) -> None:
    message = failed_operation(stubs, "missing").failure_message
    assert "no-such-mcp-server" in message and "not found" in message, message


def test_http_binding_to_a_closed_port(stubs: Stubs) -> None:
    message = failed_operation(stubs, "closed").failure_message
    assert "could not reach" in message and "http://127.0.0.1:" in message, message
    assert "Connection refused" in message, message


def test_stdio_working_directory_not_found(stubs: Stubs) -> None:
    message = failed_operation(stubs, "nowhere").failure_message
    assert "no-such-directory" in message and "not found" in message, message


def test_stdio_server_that_dies_mid_call_reports_its_stderr(stubs: Stubs) -> None:
    message = failed_operation(stubs, "crashing", "connection_closed").failure_message
    assert CRASH_REASON in message, message
