"""The MCP HTTP clients' connections on asyncio streams (m3grpc/harness/asyncio_network.py).

Against a real HTTP/1.1 server on loopback (asyncio.start_server): kept-alive
connections are reused (over TLS too, the server verified), one the server
closed while idle is not (the request goes out on a new connection), and
failures are httpx2's typed errors.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2
import pytest

from m3grpc.harness import http_clients
from m3grpc.harness.asyncio_network import AsyncioTransport
from m3grpc.harness.http11_transport import Http11Transport
from m3grpc.harness.http_clients import HttpClients, shared_ssl_context
from tests.support.certs import Authority
from tests.support.mcp_processes import free_port


class Server:
    """Answers every request `ok <connection number>`; optionally closes after each."""

    def __init__(self, *, close_after_response: bool = False, answer: bool = True) -> None:
        self.connections = 0
        self.close_after_response = close_after_response
        self.answer = answer

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number = self.connections
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                if not self.answer:
                    await reader.read()  # until the client gives up and closes
                    return
                body = f"ok {number}".encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                await writer.drain()
                if self.close_after_response:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@asynccontextmanager
async def serving(server: Server, tls: ssl.SSLContext | None = None) -> AsyncIterator[str]:
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0, ssl=tls)
    port = listener.sockets[0].getsockname()[1]
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}/mcp"
    finally:
        listener.close()


def client(
    timeout: httpx2.Timeout | None = None, context: ssl.SSLContext | None = None
) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(
        transport=AsyncioTransport(context or shared_ssl_context()),
        timeout=timeout or httpx2.Timeout(10.0),
    )


# For what both transports do alike: httpcore2's on asyncio's streams (`https://`), and
# the h11 one that `http://` sessions use (m3grpc/harness/http11_transport.py).
TRANSPORTS = {
    "asyncio_network": lambda: AsyncioTransport(shared_ssl_context()),
    "http11_transport": lambda: Http11Transport(None),
}


def client_of(transport: str) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=TRANSPORTS[transport](), timeout=httpx2.Timeout(10.0))


def server_tls(authority: Authority) -> ssl.SSLContext:
    pair = authority.server()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pair.cert, pair.key)
    return context


async def test_the_session_client_runs_on_asyncio_streams_and_keeps_connections_alive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
    server = Server()
    clients = HttpClients()
    async with serving(server) as url:
        async with clients.client({"x-test": "1"}, url=url) as http:
            first = await http.get(url)
            second = await http.post(url, json={"jsonrpc": "2.0"})
        # Another session of the loop takes the connection the first one left (closing
        # a session's client leaves the loop's pool open).
        async with clients.client({"x-test": "2"}, url=url) as http:
            third = await http.get(url)
        await clients.aclose()

    assert [(r.status_code, r.text) for r in (first, second, third)] == [(200, "ok 1")] * 3
    assert server.connections == 1


async def test_a_plain_http_server_costs_no_ssl_context(monkeypatch: pytest.MonkeyPatch) -> None:
    # Building the process's SSL context loads the CA certificates (~1.4 MB of RSS):
    # only a client for an https:// server asks for it.
    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
    built: list[ssl.SSLContext] = []

    def counted() -> ssl.SSLContext:
        built.append(shared_ssl_context())
        return built[-1]

    monkeypatch.setattr(http_clients, "shared_ssl_context", counted)
    server = Server()
    async with serving(server) as url, HttpClients().client({}, url=url) as http:
        answer = await http.get(url)
    assert (answer.status_code, answer.text) == (200, "ok 1")
    assert built == []

    async with HttpClients().client({}, url="https://127.0.0.1:9/mcp"):
        pass
    assert built == [shared_ssl_context()]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_connection_the_server_closed_while_idle_is_not_reused(transport: str) -> None:
    server = Server(close_after_response=True)
    async with serving(server) as url, client_of(transport) as http:
        first = await http.get(url)
        await asyncio.sleep(0.05)  # the server's close reaches the idle connection
        second = await http.get(url)
    assert [first.text, second.text] == ["ok 1", "ok 2"]


async def test_a_short_body_closed_unread_leaves_its_connection_for_the_next() -> None:
    # The SDK closes the 202 to a POSTed answer or notification without reading it.
    server = Server()
    async with serving(server) as url, client() as http:
        for _ in range(3):
            async with http.stream("POST", url, json={"jsonrpc": "2.0"}) as response:
                assert response.status_code == 200
    assert server.connections == 1


async def test_with_proxies_in_the_environment_httpx2_keeps_its_own_transport(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    async with HttpClients().client({}) as http:
        assert not isinstance(http._transport, AsyncioTransport)


async def test_https_verifies_the_server_and_keeps_the_connection(tmp_path: Path) -> None:
    authority = Authority.create(tmp_path / "ca")
    trusting = ssl.create_default_context(cafile=str(authority.cert))
    server = Server()
    async with serving(server, server_tls(authority)) as url, client(context=trusting) as http:
        first = await http.get(url)
        second = await http.get(url)

    assert [first.text, second.text] == ["ok 1", "ok 1"]
    assert server.connections == 1


async def test_https_to_a_server_of_an_unknown_authority_is_a_connect_error(
    tmp_path: Path,
) -> None:
    known = Authority.create(tmp_path / "known", "known")
    unknown = Authority.create(tmp_path / "unknown", "unknown")
    trusting = ssl.create_default_context(cafile=str(known.cert))
    async with serving(Server(), server_tls(unknown)) as url, client(context=trusting) as http:
        with pytest.raises(httpx2.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await http.get(url)


async def test_a_refused_connection_is_a_connect_error() -> None:
    async with client() as http:
        with pytest.raises(httpx2.ConnectError):
            await http.get(f"http://127.0.0.1:{free_port()}/mcp")


async def test_a_read_past_its_timeout_is_a_read_timeout() -> None:
    async with serving(Server(answer=False)) as url, client(httpx2.Timeout(10.0, read=0.2)) as http:
        with pytest.raises(httpx2.ReadTimeout):
            await http.get(url)


class EventStreamServer:
    """Answers every POST with an event stream: one event, then (unless `endless`) the
    end of the stream a moment later, as an MCP server ends a request's stream after
    its response."""

    def __init__(self, *, endless: bool = False) -> None:
        self.connections = 0
        self.endless = endless

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                await reader.readexactly(length)
                event = b'data: {"jsonrpc":"2.0","id":1,"result":{}}\n\n'
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n"
                    + f"{len(event):x}\r\n".encode()
                    + event
                    + b"\r\n"
                )
                await writer.drain()
                await asyncio.sleep(3600 if self.endless else 0.02)
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def first_event_then_close(http: httpx2.AsyncClient, url: str) -> str:
    """What the MCP SDK does with a request's event stream: read up to the response,
    then close it."""
    async with http.stream("POST", url, json={"jsonrpc": "2.0", "id": 1}) as response:
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                await response.aclose()
                return line
    raise AssertionError("no event")


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_event_stream_closed_at_its_answer_leaves_its_connection_for_the_next(
    transport: str,
) -> None:
    server = EventStreamServer()
    async with serving(server) as url, client_of(transport) as http:
        first = await first_event_then_close(http, url)
        second = await first_event_then_close(http, url)
    assert first == second == 'data: {"jsonrpc":"2.0","id":1,"result":{}}'
    assert server.connections == 1


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_event_stream_that_does_not_end_costs_its_connection_not_the_close(
    transport: str,
) -> None:
    server = EventStreamServer(endless=True)
    async with serving(server) as url, client_of(transport) as http:
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.wait_for(first_event_then_close(http, url), 30)
        closed_within = loop.time() - started
        await asyncio.wait_for(first_event_then_close(http, url), 30)
    # The close read what it could for a bounded moment, then gave the connection up.
    assert closed_within < 5
    assert server.connections == 2
