"""The MCP HTTP clients' HTTP/1.1 transport (m3grpc/harness/http11_transport.py).

Against real HTTP/1.1 servers on loopback (asyncio.start_server, and the SDK's MCP
server for a whole session): kept-alive connections are reused, an event stream's
body streams as the server writes it; failures are httpx2's typed errors. What it
does as `asyncio_network` does (a stream closed at its answer read to its end, so its
connection is reused; an idle connection the server closed not reused) is tested for
both transports in test_asyncio_network.py.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import pytest

from m3grpc.harness.http11_transport import Http11Transport
from tests.harness.test_asyncio_network import (
    Server,
    server_tls,
    serving,
)
from tests.support.certs import Authority
from tests.support.mcp_processes import free_port


def client(timeout: httpx2.Timeout | None = None) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(
        transport=Http11Transport(None), timeout=timeout or httpx2.Timeout(10.0, read=None)
    )


async def test_kept_alive_connections_are_reused() -> None:
    server = Server()
    async with serving(server) as url, client() as http:
        answers = [await http.get(url), await http.post(url, json={"jsonrpc": "2.0"})]
        # A body closed unread (the SDK's 202s) is short and due: read, and reused.
        async with http.stream("POST", url, json={}) as response:
            assert response.status_code == 200
        answers.append(await http.get(url))
    assert [(r.status_code, r.text) for r in answers] == [(200, "ok 1")] * 3
    assert server.connections == 1


async def test_concurrent_requests_each_take_a_connection_then_share_them() -> None:
    server = Server()
    async with serving(server) as url, client() as http:
        first = await asyncio.gather(*(http.get(url) for _ in range(3)))
        second = await asyncio.gather(*(http.get(url) for _ in range(3)))
    assert sorted(r.text for r in first) == ["ok 1", "ok 2", "ok 3"]
    assert sorted(r.text for r in second) == ["ok 1", "ok 2", "ok 3"]
    assert server.connections == 3


async def test_a_server_that_closes_without_answering_is_a_protocol_error() -> None:
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.close()

    listener = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        async with client() as http:
            with pytest.raises(httpx2.RemoteProtocolError):
                await http.get(f"http://127.0.0.1:{port}/mcp")
    finally:
        listener.close()


async def test_a_refused_connection_is_a_connect_error_caused_by_the_os() -> None:
    async with client() as http:
        with pytest.raises(httpx2.ConnectError) as caught:
            await http.get(f"http://127.0.0.1:{free_port()}/mcp")
    assert isinstance(caught.value.__cause__, ConnectionRefusedError)


async def test_a_read_past_its_timeout_is_a_read_timeout() -> None:
    async with serving(Server(answer=False)) as url, client(httpx2.Timeout(10.0, read=0.2)) as http:
        with pytest.raises(httpx2.ReadTimeout):
            await http.get(url)


class Streaming:
    """An event stream written as the test says: the head, then one event per
    `events` item, then the end when `end` is set."""

    def __init__(self) -> None:
        self.events: asyncio.Queue[bytes] = asyncio.Queue()
        self.end = asyncio.Event()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        while not self.end.is_set():
            event = await self.events.get()
            writer.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()


async def lines(response: httpx2.Response) -> AsyncIterator[str]:
    async for line in response.aiter_lines():
        if line:
            yield line


async def test_an_event_stream_body_streams_as_the_server_writes_it() -> None:
    server = Streaming()
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}/mcp"
    try:
        async with client() as http, http.stream("GET", url) as response:
            received = lines(response)
            for number in range(3):
                # Each event arrives before the server writes the next one.
                await server.events.put(f"data: {number}\n\n".encode())
                assert await anext(received) == f"data: {number}"
            server.end.set()
            await server.events.put(b"data: last\n\n")
            assert [line async for line in received] == ["data: last"]
    finally:
        listener.close()


async def test_closing_the_transport_closes_its_idle_connections() -> None:
    server = Server()
    transport = Http11Transport(None)
    async with serving(server) as url:
        http = httpx2.AsyncClient(transport=transport)
        await http.get(url)
        await transport.aclose()
        await asyncio.sleep(0.05)
        await http.get(url)  # a new connection
        await transport.aclose()
    assert server.connections == 2


async def test_https_verifies_the_server_and_keeps_the_connection(tmp_path: Path) -> None:
    authority = Authority.create(tmp_path / "ca")
    trusting = ssl.create_default_context(cafile=str(authority.cert))
    server = Server()
    async with serving(server, server_tls(authority)) as url:
        async with httpx2.AsyncClient(transport=Http11Transport(trusting)) as http:
            answers = [await http.get(url), await http.get(url)]
        unknown = Authority.create(tmp_path / "unknown", "unknown")
        distrusting = ssl.create_default_context(cafile=str(unknown.cert))
        async with httpx2.AsyncClient(transport=Http11Transport(distrusting)) as http:
            with pytest.raises(httpx2.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await http.get(url)
    assert [r.text for r in answers] == ["ok 1", "ok 1"]
    assert server.connections == 1  # (a failed handshake never reaches the handler)
