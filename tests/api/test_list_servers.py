"""ListServers: a client discovers the configured bindings and their tools
without the repository; a binding that cannot be reached says why; an unknown
binding name (ListServers or Submit) lists the known ones."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from m3grpc.client import AsyncRemoteMCPTestKit, RemoteMCPTestKit
from m3grpc.errors import ServerBindingNotFoundError
from m3grpc.wire.gen.m3.v1 import execution_pb2, execution_service_pb2
from tests.api.conftest import (
    ServerProcess,
    Stubs,
    add_servers,
    expect_failure,
    running,
    write_config,
)

KNOWN = ["closed", "example", "missing", "shipping", "shipping_mrtr"]


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("list-servers")
    config = write_config(tmp / "m3.toml", tmp / "m3.sqlite")
    bindings = {
        "missing": {"command": str(tmp / "no-such-mcp-server")},
        "closed": {"url": f"http://127.0.0.1:{_closed_port()}/mcp", "protocol": "2026-07-28"},
    }
    add_servers(config, bindings)
    yield from running(ServerProcess(config, tmp / "server.log").start())


def test_bindings_without_connecting(server: ServerProcess) -> None:
    with RemoteMCPTestKit(server.address) as kit:
        servers = kit.list_servers()
    assert [s.name for s in servers] == KNOWN
    by_name = {s.name: s for s in servers}
    assert by_name["shipping"].transport == "stdio"
    assert by_name["example"].protocol == "legacy"
    assert by_name["shipping"].protocol == "auto"
    assert by_name["closed"].transport == "streamable_http"
    assert by_name["closed"].protocol == "2026-07-28"
    # Nothing was contacted: no tools, no errors.
    assert all(not s.tools and s.tools_error is None for s in servers)
    # The configuration's commands and URLs never leave the service.
    assert "no-such-mcp-server" not in repr(servers)
    assert "127.0.0.1" not in repr(servers)


def test_tools_discovered_by_connecting(server: ServerProcess) -> None:
    with RemoteMCPTestKit(server.address) as kit:
        servers = {s.name: s for s in kit.list_servers(include_tools=True)}
    example = servers["example"]
    assert example.tools_error is None
    assert example.negotiated_protocol_version  # the legacy handshake's version
    tool = next(t for t in example.tools if t.name == "book_shipment")
    assert tool.description == "Book a shipment after asking where it goes."
    assert tool.input_schema.get("type") == "object"
    assert "book_shipment" in {t.name for t in servers["shipping"].tools}
    assert "book_shipment" in {t.name for t in servers["shipping_mrtr"].tools}

    missing = servers["missing"]
    assert missing.tools == ()
    assert missing.tools_error is not None
    assert missing.tools_error.code == "server_unavailable"
    assert "command not found" in missing.tools_error.message
    closed = servers["closed"]
    assert closed.tools_error is not None
    assert closed.tools_error.code == "server_unavailable"


def test_names_filter_and_unknown_names(server: ServerProcess) -> None:
    with RemoteMCPTestKit(server.address) as kit:
        only = kit.list_servers(["shipping", "example"])
        assert [s.name for s in only] == ["example", "shipping"]
        with pytest.raises(ServerBindingNotFoundError) as caught:
            kit.list_servers(["shiping"])
    error = caught.value
    assert error.code == "NOT_FOUND"
    assert error.metadata["server"] == "shiping"
    assert error.metadata["known_servers"] == ",".join(KNOWN)
    assert "configured: closed, example, missing, shipping, shipping_mrtr" in error.message


def test_submit_to_an_unknown_binding_lists_the_known_ones(server: ServerProcess) -> None:
    stubs = Stubs(grpc.insecure_channel(server.address))
    try:
        failure = expect_failure(
            stubs.executions.Submit,
            execution_service_pb2.SubmitRequest(
                agent=execution_pb2.AgentSpec(
                    harness="scripted", server="shiping", tools=["shiping:book_shipment"]
                )
            ),
            timeout=30,
        )
    finally:
        stubs.close()
    assert failure.code == grpc.StatusCode.NOT_FOUND
    assert failure.info.reason == "SERVER_BINDING_NOT_FOUND"
    assert failure.info.metadata["known_servers"] == ",".join(KNOWN)
    assert "shipping_mrtr" in failure.status.message


async def test_async_client(server: ServerProcess, tmp_path: Path) -> None:
    async with AsyncRemoteMCPTestKit(server.address) as kit:
        servers = await kit.list_servers(["example"], include_tools=True)
        assert [s.name for s in servers] == ["example"]
        assert [t.name for t in servers[0].tools] == ["book_shipment"]
        with pytest.raises(ServerBindingNotFoundError):
            await kit.list_servers(["nope"])
