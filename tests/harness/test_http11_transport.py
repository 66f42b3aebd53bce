"""The MCP HTTP clients' HTTP/1.1 transport (m3grpc/harness/http11_transport.py).

Against real HTTP/1.1 servers on loopback (asyncio.start_server): kept-alive
connections are reused (over TLS too, the server verified), one the server closed
while idle is not, an event stream closed at its answer is read to its end so that
its connection is reused, an event stream's body streams as the server writes it;
failures are httpx2's typed errors. An idempotent request on a reused connection
that the server closes or resets before any byte of a response goes again on a new
one; a POST, one on a new connection, or one after part of a response is not sent
again.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2
import pytest

from m3grpc.harness.http11_transport import Http11Transport
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


def server_tls(authority: Authority) -> ssl.SSLContext:
    pair = authority.server()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pair.cert, pair.key)
    return context


def client(timeout: httpx2.Timeout | None = None) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(
        transport=Http11Transport(), timeout=timeout or httpx2.Timeout(10.0, read=None)
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
    transport = Http11Transport()
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
        async with httpx2.AsyncClient(transport=Http11Transport(lambda: trusting)) as http:
            answers = [await http.get(url), await http.get(url)]
        unknown = Authority.create(tmp_path / "unknown", "unknown")
        distrusting = ssl.create_default_context(cafile=str(unknown.cert))
        async with httpx2.AsyncClient(transport=Http11Transport(lambda: distrusting)) as http:
            with pytest.raises(httpx2.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await http.get(url)
    assert [r.text for r in answers] == ["ok 1", "ok 1"]
    assert server.connections == 1  # (a failed handshake never reaches the handler)


async def test_a_connection_the_server_closed_while_idle_is_not_reused() -> None:
    server = Server(close_after_response=True)
    async with serving(server) as url, client() as http:
        first = await http.get(url)
        await asyncio.sleep(0.05)  # the server's close reaches the idle connection
        second = await http.get(url)
    assert [first.text, second.text] == ["ok 1", "ok 2"]


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


async def test_an_event_stream_closed_at_its_answer_leaves_its_connection_for_the_next() -> None:
    server = EventStreamServer()
    async with serving(server) as url, client() as http:
        first = await first_event_then_close(http, url)
        second = await first_event_then_close(http, url)
    assert first == second == 'data: {"jsonrpc":"2.0","id":1,"result":{}}'
    assert server.connections == 1


async def test_an_event_stream_that_does_not_end_costs_its_connection_not_the_close() -> None:
    server = EventStreamServer(endless=True)
    async with serving(server) as url, client() as http:
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.wait_for(first_event_then_close(http, url), 30)
        closed_within = loop.time() - started
        await asyncio.wait_for(first_event_then_close(http, url), 30)
    # The close read what it could for a bounded moment, then gave the connection up.
    assert closed_within < 5
    assert server.connections == 2


class HangsUpOnSecond:
    """Answers a connection's first request (kept alive, echoing its body) and, on
    the connection's second, does what `second` says: "close" or "reset" without a
    byte (a server closing an idle connection as the request comes), "part-head"
    (the first bytes of a head, then the close), or "head" (a whole head and part of
    its body, then the close)."""

    def __init__(self, second: str) -> None:
        self.second = second
        self.connections = 0
        self.requests = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            for number in (1, 2):
                body = await read_request(reader)
                self.requests += 1
                if number == 1:
                    writer.write(
                        b"HTTP/1.1 200 OK\r\n"
                        + f"Content-Length: {len(body)}\r\n\r\n".encode()
                        + body
                    )
                elif self.second == "reset":
                    # No lingering: the close sends a reset instead of the end.
                    sock = writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                elif self.second == "part-head":
                    writer.write(b"HTTP/1.1 20")
                elif self.second == "head":
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nok")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """A request's body, read to its end (a close with some of it unread would reset)."""
    head = await reader.readuntil(b"\r\n\r\n")
    for line in head.lower().split(b"\r\n"):
        if line.startswith(b"content-length:"):
            return await reader.readexactly(int(line.split(b":", 1)[1]))
        if line == b"transfer-encoding: chunked":
            return await reader.readuntil(b"\r\n0\r\n\r\n")  # (not parsed: unused)
    return b""


@pytest.mark.parametrize(("second", "method"), [("close", "GET"), ("reset", "DELETE")])
async def test_an_idempotent_request_on_a_reused_connection_closed_before_any_response_goes_again(
    second: str, method: str
) -> None:
    server = HangsUpOnSecond(second)
    async with serving(server) as url, client() as http:
        first = await asyncio.wait_for(http.post(url, content=b"one"), 10)
        # The same connection, which the server closes as this request comes.
        again = await asyncio.wait_for(http.request(method, url), 10)
    assert (first.status_code, first.text) == (200, "one")
    assert again.status_code == 200
    assert (server.connections, server.requests) == (2, 3)


@pytest.mark.parametrize("second", ["close", "reset"])
async def test_a_post_on_a_reused_connection_closed_before_any_response_is_not_sent_again(
    second: str,
) -> None:
    """The server may have read it (a crash, not an idle close): an MCP request is not
    run twice."""
    server = HangsUpOnSecond(second)
    async with serving(server) as url, client() as http:
        await asyncio.wait_for(http.post(url, content=b"one"), 10)
        with pytest.raises((httpx2.RemoteProtocolError, httpx2.ReadError)):
            await asyncio.wait_for(http.post(url, json={"jsonrpc": "2.0"}), 10)
    assert (server.connections, server.requests) == (1, 2)


async def test_a_new_connection_closed_without_an_answer_is_a_protocol_error() -> None:
    """Not sent again, even idempotent: only a reused connection's close may be the
    server's idle close."""
    requests = 0

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal requests
        await read_request(reader)
        requests += 1
        writer.close()

    listener = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        async with client() as http:
            with pytest.raises(httpx2.RemoteProtocolError):
                await asyncio.wait_for(http.get(f"http://127.0.0.1:{port}/mcp"), 10)
    finally:
        listener.close()
    assert requests == 1


@pytest.mark.parametrize("second", ["part-head", "head"])
async def test_a_reused_connection_closed_after_part_of_a_response_is_not_sent_again(
    second: str,
) -> None:
    server = HangsUpOnSecond(second)
    async with serving(server) as url, client() as http:
        await asyncio.wait_for(http.post(url, content=b"one"), 10)
        with pytest.raises(httpx2.RemoteProtocolError):
            await asyncio.wait_for(http.get(url), 10)
    assert (server.connections, server.requests) == (1, 2)


async def test_a_body_that_cannot_be_sent_again_is_not() -> None:
    server = HangsUpOnSecond("close")

    async def body() -> AsyncIterator[bytes]:
        yield b"two"

    async with serving(server) as url, client() as http:
        await asyncio.wait_for(http.post(url, content=b"one"), 10)
        with pytest.raises(httpx2.RemoteProtocolError):
            await asyncio.wait_for(http.put(url, content=body()), 10)
    assert (server.connections, server.requests) == (1, 2)


def test_it_connects_on_uvloop_by_name_and_by_address() -> None:
    """An application embedding the kit may run it on uvloop (uvicorn's loop when it is
    installed), whose connect takes no happy-eyeballs delay: a server is reached by
    name and by address, and a kept-alive connection is reused."""
    uvloop = pytest.importorskip("uvloop")
    server = Server()

    async def requests() -> list[str]:
        async with serving(server) as url, client() as http:
            by_name = url.replace("127.0.0.1", "localhost")
            answers = [await asyncio.wait_for(http.get(u), 10) for u in (url, url, by_name)]
        return [answer.text for answer in answers]

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert runner.run(requests()) == ["ok 1", "ok 1", "ok 2"]


class Replies:
    """Answers each request on a connection with the next of `replies` (raw bytes, as
    written), then closes if `close_after` is set; keeps every request it read (its
    head, and its body with a chunked one's framing removed)."""

    def __init__(self, *replies: bytes, close_after: bool = False) -> None:
        self.replies = list(replies)
        self.close_after = close_after
        self.connections = 0
        self.requests: list[tuple[bytes, bytes]] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.replies:
                head = await reader.readuntil(b"\r\n\r\n")
                self.requests.append((head, await read_body(reader, head)))
                writer.write(self.replies.pop(0))
                await writer.drain()
            if not self.close_after:
                await reader.read()  # until the client closes
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # (cancelled: the test ended before the client's close came)
        finally:
            writer.close()


async def read_body(reader: asyncio.StreamReader, head: bytes) -> bytes:
    fields = head.lower().split(b"\r\n")
    for line in fields:
        if line.startswith(b"content-length:"):
            return await reader.readexactly(int(line.split(b":", 1)[1]))
    if b"transfer-encoding: chunked" in fields:
        body = b""
        while size := int((await reader.readuntil(b"\r\n"))[:-2], 16):
            body += (await reader.readexactly(size + 2))[:-2]
        await reader.readexactly(2)
        return body
    return b""


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


async def test_bodies_framed_by_length_by_chunks_and_by_the_close_are_read_whole() -> None:
    """The first two leave their connection for the next request; a body that ends
    with the connection takes it along."""
    server = Replies(
        b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nlength",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nchu\r\n4\r\nnked\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the close",
        close_after=True,
    )
    async with serving(server) as url, client() as http:
        bodies = [(await asyncio.wait_for(http.get(url), 10)).text for _ in range(3)]
        server.replies.append(OK)
        last = await asyncio.wait_for(http.get(url), 10)
    assert bodies == ["length", "chunked", "until the close"]
    assert last.text == "ok"
    assert server.connections == 2


async def test_informational_responses_come_before_the_answer() -> None:
    server = Replies(
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + OK
    )
    async with serving(server) as url, client() as http:
        answer = await asyncio.wait_for(http.post(url, content=b"x"), 10)
    assert (answer.status_code, answer.text) == (200, "ok")
    assert answer.headers["content-length"] == "2"


async def test_a_head_response_has_no_body_whatever_its_length_says() -> None:
    server = Replies(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", OK, close_after=True)
    async with serving(server) as url, client() as http:
        head = await asyncio.wait_for(http.head(url), 10)
        after = await asyncio.wait_for(http.get(url), 10)
    assert (head.status_code, head.headers["content-length"], head.content) == (200, "10", b"")
    assert after.text == "ok"


@pytest.mark.parametrize(
    "reply",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
        b"HTTP/1.1 2OO OK\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ],
)
async def test_a_malformed_response_is_a_protocol_error(reply: bytes) -> None:
    async with serving(Replies(reply)) as url, client() as http:
        with pytest.raises(httpx2.RemoteProtocolError):
            await asyncio.wait_for(http.get(url), 10)


async def test_a_body_cut_short_by_the_close_is_a_protocol_error() -> None:
    server = Replies(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nok", close_after=True)
    async with serving(server) as url, client() as http:
        with pytest.raises(httpx2.RemoteProtocolError, match="complete message body"):
            await asyncio.wait_for(http.get(url), 10)


async def test_bytes_past_the_response_cost_the_connection() -> None:
    server = Replies(OK + b"HTTP/1.1 200 OK\r\n", OK, close_after=True)
    async with serving(server) as url, client() as http:
        answers = [(await asyncio.wait_for(http.get(url), 10)).text for _ in range(2)]
    assert answers == ["ok", "ok"]
    assert server.connections == 2


async def test_a_streamed_request_body_goes_chunked_and_a_known_one_by_its_length() -> None:
    async def parts() -> AsyncIterator[bytes]:
        for part in (b"one ", b"", b"two"):
            yield part

    server = Replies(OK, OK)
    async with serving(server) as url, client() as http:
        await asyncio.wait_for(http.post(url, content=parts()), 10)
        await asyncio.wait_for(http.post(url, json={"a": 1}), 10)
    (streamed_head, streamed), (known_head, known) = server.requests
    assert b"transfer-encoding: chunked" in streamed_head.lower()
    assert streamed == b"one two"
    assert b"\r\ncontent-length: 7\r\n" in known_head.lower()
    assert known == b'{"a":1}'


@pytest.mark.parametrize(
    "headers",
    [{"x-token": "a\r\nx-injected: 1"}, {"x-token": "a\nb"}, {"bad name": "v"}, {"x": "a\x00"}],
)
async def test_a_header_that_would_break_the_request_head_is_refused_unsent(
    headers: dict[str, str],
) -> None:
    server = Replies(OK)
    async with serving(server) as url, client() as http:
        with pytest.raises(httpx2.LocalProtocolError):
            await asyncio.wait_for(http.get(url, headers=headers), 10)
    assert server.requests == []


async def test_a_body_longer_than_its_declared_length_is_refused() -> None:
    async def parts() -> AsyncIterator[bytes]:
        yield b"longer than three"

    server = Replies(OK)
    async with serving(server) as url, client() as http:
        with pytest.raises(httpx2.LocalProtocolError, match="Too much data"):
            await asyncio.wait_for(
                http.post(url, content=parts(), headers={"content-length": "3"}), 10
            )
