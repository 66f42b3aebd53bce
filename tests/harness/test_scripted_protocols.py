"""The scripted harness and the protocol a binding is pinned to, against real servers.

A binding pinned to `2026-07-28` whose server speaks only the legacy
handshake fails its operation `protocol_mismatch`, naming both protocols,
over stdio (tests/mcp_servers, legacy variant: handshake only) and Streamable
HTTP (@modelcontextprotocol/server-everything, a 2025-11-25 server).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from m3grpc.harness import HarnessTask, InputRound, OperationStep, ScriptedHarness
from m3grpc.servers import HttpServer, ServerBinding, StdioServer
from m3grpc.types import ElicitationResponse
from tests.support.everything import everything_http

SERVERS = Path(__file__).resolve().parents[1] / "mcp_servers"
MISMATCH = (
    "is pinned to MCP protocol 2026-07-28, but the server offered 2025-11-25 "
    "(it answered the initialize handshake, not server/discover)"
)


def task_for(server: ServerBinding, step: OperationStep) -> HarnessTask:
    return HarnessTask(
        execution_id="exec-protocols",
        prompt="",
        server=server,
        tools=[f"{server.name}:{step.name}"],
        script=[step, step],  # the second step never runs: the first one stops the script
    )


async def never_asked(round: InputRound) -> Mapping[str, ElicitationResponse]:
    raise AssertionError(f"no round expected, got {round}")


def shipping(variant: str, protocol: str) -> StdioServer:
    return StdioServer.model_validate(
        {
            "name": "shipping",
            "command": sys.executable,
            "args": [str(SERVERS / "shipping.py"), "--variant", variant],
            "protocol": protocol,
        }
    )


async def test_stdio_legacy_server_under_a_2026_binding_is_a_protocol_mismatch() -> None:
    task = task_for(shipping("legacy", "2026-07-28"), OperationStep("tool", "quote"))

    [result] = await ScriptedHarness().run(task, never_asked)

    assert result.failure_code == "protocol_mismatch"
    assert result.failure_message == f"binding 'shipping' {MISMATCH}"


async def test_stdio_2026_server_under_a_2026_binding_runs() -> None:
    task = task_for(shipping("mrtr", "2026-07-28"), OperationStep("tool", "quote"))

    results = await ScriptedHarness().run(task, never_asked)

    assert [r.ok for r in results] == [True, True]


@pytest.mark.node
async def test_http_legacy_server_under_a_2026_binding_is_a_protocol_mismatch() -> None:
    with everything_http() as url:
        echo = OperationStep("tool", "echo", {"message": "hi"})
        server = HttpServer(name="everything", url=url, protocol="2026-07-28")

        [result] = await ScriptedHarness().run(task_for(server, echo), never_asked)

        # With "auto" the same server answers.
        auto = HttpServer(name="everything", url=url)
        echoed = await ScriptedHarness().run(task_for(auto, echo), never_asked)

    assert result.failure_code == "protocol_mismatch"
    assert result.failure_message == f"binding 'everything' {MISMATCH}"
    assert [r.ok for r in echoed] == [True, True]
