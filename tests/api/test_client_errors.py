"""The Python remote client raises a typed M3Error for every failed call, as the
TypeScript and Go clients do: ServiceShuttingDownError for a watch the server
ends on shutdown, InternalError for INTERNAL, and RemoteCallError (with the
status code) for transport failures: sync and asyncio, unary calls and
WatchPending streams."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from m3grpc.api.server import add_m3_services
from m3grpc.api.watch import PendingWatch
from m3grpc.client import (
    AsyncRemoteMCPTestKit,
    RemoteCallError,
    RemoteMCPTestKit,
    RoundPending,
)
from m3grpc.errors import (
    InternalError,
    M3Error,
    ManagedInputValidationError,
    ServiceShuttingDownError,
)

from .conftest import ServerProcess, start_server


def _closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"127.0.0.1:{port}"


def _check_remote(error: M3Error, code: str) -> None:
    assert isinstance(error, RemoteCallError), repr(error)
    assert error.code == code
    assert error.unknown_reason == ""
    assert isinstance(error.__cause__, grpc.RpcError)


# -- transport failures -------------------------------------------------------------------


def test_transport_failures_are_typed() -> None:
    with RemoteMCPTestKit(_closed_port(), timeout=10) as kit:
        with pytest.raises(RemoteCallError) as caught:
            kit.handle("exe_x").snapshot()
        _check_remote(caught.value, "UNAVAILABLE")
        with pytest.raises(RemoteCallError) as caught:
            next(iter(kit.watch_pending(execution_id="exe_x")))
        _check_remote(caught.value, "UNAVAILABLE")


def test_a_call_deadline_is_typed() -> None:
    # A peer that accepts the connection and never answers: the call can only end at
    # its deadline. (A real service answering an unknown id in time would be NOT_FOUND,
    # however short the deadline: the reply may beat the client's deadline timer.)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        with (
            RemoteMCPTestKit(address, timeout=0.2) as kit,
            pytest.raises(RemoteCallError) as caught,
        ):
            kit.handle("exe_x").snapshot()
    _check_remote(caught.value, "DEADLINE_EXCEEDED")


async def test_async_transport_failures_are_typed() -> None:
    async with AsyncRemoteMCPTestKit(_closed_port(), timeout=10) as kit:
        with pytest.raises(RemoteCallError) as caught:
            await kit.handle("exe_x").snapshot()
        _check_remote(caught.value, "UNAVAILABLE")
        with pytest.raises(RemoteCallError) as caught:
            await anext(kit.watch_pending(execution_id="exe_x"))
        _check_remote(caught.value, "UNAVAILABLE")


def test_typed_errors_carry_their_status_code(shared_server: ServerProcess) -> None:
    with (
        RemoteMCPTestKit(shared_server.address) as kit,
        pytest.raises(ManagedInputValidationError) as invalid,
    ):
        kit.handle("").snapshot()  # a malformed ID: docs/reference/identifiers.md
    assert invalid.value.code == "INVALID_ARGUMENT"


# -- INTERNAL ---------------------------------------------------------------------------------


class BrokenRuntime:
    """A runtime whose every call fails unexpectedly: the service answers INTERNAL."""

    def __getattr__(self, name: str) -> Any:
        async def fail(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("boom")

        return fail


async def _broken_server() -> tuple[grpc.aio.Server, str]:
    runtime: Any = BrokenRuntime()
    watch = PendingWatch(runtime, poll_interval=0.1, shutdown=asyncio.Event())
    server = grpc.aio.server()
    add_m3_services(server, runtime, {}, watch)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


async def test_internal_is_typed() -> None:
    server, address = await _broken_server()
    try:
        async with AsyncRemoteMCPTestKit(address, timeout=30) as kit:
            with pytest.raises(InternalError) as caught:
                await kit.handle("exe_x").snapshot()
            assert caught.value.code == "INTERNAL"
            with pytest.raises(InternalError):
                await anext(kit.watch_pending())

        def sync_calls() -> None:
            with RemoteMCPTestKit(address, timeout=30) as kit:
                with pytest.raises(InternalError) as caught:
                    kit.handle("exe_x").cancel()
                assert caught.value.code == "INTERNAL"
                assert isinstance(caught.value.__cause__, grpc.RpcError)

        await asyncio.to_thread(sync_calls)
    finally:
        await server.stop(0)


# -- shutdown ------------------------------------------------------------------------------


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[ServerProcess]:
    server = start_server(tmp_path, grace=0.5)
    try:
        yield server
    finally:
        server.kill()


def test_watch_ended_by_shutdown_is_typed(own_server: ServerProcess) -> None:
    with RemoteMCPTestKit(own_server.address) as kit:
        agent = kit.agents([{"harness": "scripted"}])[0]
        agent.submit(
            "p", server="shipping", tools=["shipping:book_shipment"], human_input="managed"
        )
        events = kit.watch_pending()
        assert isinstance(next(events), RoundPending)  # the stream is open
        threading.Thread(target=own_server.terminate, daemon=True).start()
        with pytest.raises(ServiceShuttingDownError) as caught:
            for _ in events:
                pass
    assert caught.value.code == "UNAVAILABLE"
    assert isinstance(caught.value.__cause__, grpc.RpcError)


async def test_async_watch_ended_by_shutdown_is_typed(own_server: ServerProcess) -> None:
    async with AsyncRemoteMCPTestKit(own_server.address) as kit:
        agent = kit.agents([{"harness": "scripted"}])[0]
        await agent.submit(
            "p", server="shipping", tools=["shipping:book_shipment"], human_input="managed"
        )
        events: AsyncIterator[Any] = kit.watch_pending()
        assert isinstance(await anext(events), RoundPending)
        stopping = asyncio.create_task(asyncio.to_thread(own_server.terminate))
        with pytest.raises(ServiceShuttingDownError) as caught:
            async for _ in events:
                pass
        await stopping
    assert caught.value.code == "UNAVAILABLE"
