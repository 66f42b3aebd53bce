"""HTTP/1.1 for the MCP HTTP clients: httptools on asyncio streams, one pool per event loop.

Every direct connection of the MCP sessions (`http://` and `https://` servers; see
`http_clients`) goes through it.

httpcore2's connection pool and HTTP/1.1 connection were about a third of the
harness's CPU on legacy executions: its pool re-examines every connection it holds
on each request and each response's end (a paused legacy execution holds two: its
GET stream and its call), and each request goes through several layers of locks and
state. This transport keeps only what the sessions need: it frames the requests,
httptools (llhttp) parses the responses, asyncio's streams carry them, and idle
connections wait in a list per (scheme, host, port), the last one used taken first.

What it keeps of httpcore2's behaviour: response bodies stream (an event stream stays
open as long as the server keeps it: reads time out only when a read timeout is set,
and the sessions set none); a connection whose response was read to its end goes
back to the pool (at most `max_keepalive` idle per server, for `keepalive_expiry`
seconds), one closed early is closed; an idle connection the server closed or wrote
to is not reused; connect and write timeouts; failures as httpx2's errors (connect,
read, write, timeouts, protocol errors), the OS error as their cause. What it does
not keep: a cap on connections. A request with no idle connection opens one, so that
it never waits for another execution's call (a paused one holds its connection for as
long as a human takes).

What it adds: a request of an idempotent method (GET, DELETE, ...) sent on a reused
connection that the server closed or reset before any byte of a response is sent
once more, on a new connection. A server closes a connection it holds idle (uvicorn
after 5 s, gunicorn after 2 s, proxies after their own time) without telling the
client first, and a request sent on it as it closes never reaches the server's
application. As Go's net/http: only a reused connection (a new one the server closes
has no such excuse), only before any byte of the response (a 1xx included), only on
a close or reset (not a timeout), only a body that can be sent again (httpx2's bytes
content; not a stream), and not a POST: a server that read it and then closed
without a word (a crash; behind a load balancer, the next connection reaches another
replica) would run it twice, and an MCP request (a `tools/call`) may not be safe to
run twice. So a session's GET stream and DELETE are sent again; a POST fails as
before (the operation fails `connection_closed`), which the pool's idle expiry,
below common servers' idle timeouts, keeps rare.

A POST answered with an event stream gives its connection back for the next
request: the SDK stops reading such a stream at the answer it waited for and
closes it, and a response closed before its end costs its connection (a legacy
session opened one per request, seven). The server ends that stream right after
the answer, so closing reads what is left of it first (briefly, boundedly). So does
closing a short body of a known length (the SDK closes the 202 to a POSTed answer or
notification without reading its empty body).

Only for an asyncio event loop: asyncio's own (M3's runtime runs on one) or uvloop (an
application embedding the kit may run it there); cancellation by the SDK's anyio cancel
scopes works as for any asyncio await. asyncio's streams also spare anyio's per-call
layers (a happy-eyeballs task group per connection, a cancel scope per read and write:
a sixth of the service's CPU on legacy executions).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

import httptools
import httpx2

log = logging.getLogger(__name__)

# RFC 9110's idempotent methods: sent again after a reused connection's idle close.
_IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})
_READ_BYTES = 64 * 1024
# RFC 8305's connection attempt delay, as anyio's connect_tcp uses.
_HAPPY_EYEBALLS_DELAY = 0.25
# What is read of a POST's event stream, when it is closed, to reuse its connection:
# the server's end of the stream is due right after the answer; anything more
# (a server that keeps the stream open) costs the connection.
_REST_SECONDS = 0.5
_REST_BYTES = 64 * 1024
# An origin: scheme, host, port.
_Origin = tuple[bytes, bytes, int]


class _Head:
    """A response's status line and headers, with the two the transport reads itself
    (their last value; None when absent)."""

    __slots__ = ("content_length", "content_type", "headers", "reason", "status_code")

    def __init__(self, status_code: int, reason: bytes, headers: list[tuple[bytes, bytes]]) -> None:
        self.status_code = status_code
        self.reason = reason
        self.headers = headers
        self.content_length: bytes | None = None
        self.content_type: bytes | None = None


class _ProtocolError(Exception):
    """The server broke HTTP/1.1 (httpx2's RemoteProtocolError)."""


class _LocalProtocolError(Exception):
    """The request cannot be sent as HTTP/1.1 (httpx2's LocalProtocolError)."""


# What `_Connection.next_event` gives after a head: body parts (bytes), then one of these.
_END = object()  # the body's end: the connection may serve the next request
_CLOSED = object()  # the body ended with the connection (a body framed by the close)

# Where a connection is in its current exchange.
_AWAITING_HEAD, _IN_BODY, _DONE = range(3)

# RFC 9110's token (a method, a header's name) and the bytes a header's value may not
# hold (those that would end it or the head early).
_TOKEN = re.compile(rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+")
_VALUE_BREAKS = re.compile(rb"[\x00\r\n]")
_TARGET_BREAKS = re.compile(rb"[\x00-\x20\x7f]")


class _Connection:
    """One TCP (or TLS) connection: it frames requests and parses responses with
    httptools (llhttp, in C: h11's pure-Python parsing was a tenth of the service's CPU
    on legacy executions). The parser calls back (`on_*`) as it reads; what it found
    waits in `_events` for `next_event`."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.idle_since = 0.0
        self._parser = httptools.HttpResponseParser(self)
        self._events: deque[object] = deque()
        self._state = _AWAITING_HEAD
        self._status = b""
        self._fields: list[tuple[bytes, bytes]] = []
        # The exchange under way: the request sent whole, the response's bytes so far,
        # whether its body is framed by the connection's close, the server's end read,
        # and whether both sides let the connection serve another request.
        self._sent = False
        self.received = 0
        self._until_close = False
        self._head_only = False
        self.eof = False
        self._keep_alive = True

    def stale(self) -> bool:
        """Whether an idle connection must not be reused: the server sent something
        since (data, its close, a reset) or it was closed."""
        reader = self.reader
        return (
            reader.at_eof()
            or reader.exception() is not None
            or self.writer.is_closing()
            or bool(getattr(reader, "_buffer", b""))
        )

    def reusable(self) -> bool:
        """Whether the exchange ended cleanly and both sides keep the connection."""
        return self._state == _DONE and self._sent and self._keep_alive and not self._events

    def close(self) -> None:
        self.writer.close()

    async def send(self, request: httpx2.Request, timeout: float | None) -> None:
        self._start_exchange(request.method == "HEAD")
        head, length, chunked = _request_head(request)
        stream = request.stream
        assert isinstance(stream, httpx2.AsyncByteStream)
        if isinstance(stream, httpx2.ByteStream):
            # In memory already: head and body leave in one write.
            body = b"".join([chunk async for chunk in stream])
            _check_length(length, chunked, len(body))
            self.writer.write(head + (_chunked(body) + b"0\r\n\r\n" if chunked else body))
        else:
            self.writer.write(head)
            sent = 0
            async for chunk in stream:
                if not chunk:
                    continue
                sent += len(chunk)
                if _over_length(length, chunked, sent):
                    raise _LocalProtocolError("Too much data for declared Content-Length")
                self.writer.write(_chunked(chunk) if chunked else chunk)
                await self._drain(timeout)
            _check_length(length, chunked, sent)
            if chunked:
                self.writer.write(b"0\r\n\r\n")
        self._sent = True
        await self._drain(timeout)

    def _start_exchange(self, head_only: bool) -> None:
        self._state = _AWAITING_HEAD
        self._sent = False
        self.received = 0
        self._head_only = head_only
        self._until_close = False

    async def _drain(self, timeout: float | None) -> None:
        if not self.writer.transport.get_write_buffer_size():
            return  # all of it went to the socket: nothing to wait for
        async with asyncio.timeout(timeout):
            await self.writer.drain()

    async def next_event(self, timeout: float | None) -> object:
        """The response's next part: a `_Head` (1xx ones first), body bytes, then
        `_END` or `_CLOSED`; reads from the socket as it needs."""
        events = self._events
        while not events:
            if self.eof:
                return self._at_eof()
            if timeout is None:
                data = await self.reader.read(_READ_BYTES)
            else:
                async with asyncio.timeout(timeout):
                    data = await self.reader.read(_READ_BYTES)
            if not data:
                self.eof = True  # the server closed its end
                continue
            self.received += len(data)
            try:
                self._parser.feed_data(data)
            except httptools.HttpParserUpgrade as exc:  # a 101: no request here asks for one
                raise _ProtocolError("unexpected protocol switch") from exc
            except httptools.HttpParserError as exc:
                raise _ProtocolError(str(exc) or "malformed response") from exc
        return events.popleft()

    def _at_eof(self) -> object:
        self._keep_alive = False
        if self._state == _AWAITING_HEAD:
            raise _ProtocolError(
                "Server disconnected without sending a response."
                if not self.received
                else "peer closed connection without sending complete response head"
            )
        if self._state == _IN_BODY:
            if not self._until_close:
                raise _ProtocolError("peer closed connection without sending complete message body")
            self._state = _DONE
        return _CLOSED

    # httptools' callbacks, in the order it makes them for a response.

    def on_message_begin(self) -> None:
        if self._state == _DONE:
            self._keep_alive = False  # the server wrote past its response
        self._status = b""
        self._fields = []

    def on_status(self, status: bytes) -> None:
        self._status += status  # in parts when it spans reads

    def on_header(self, name: bytes, value: bytes) -> None:
        self._fields.append((name, value))

    def on_headers_complete(self) -> None:
        if self._state == _DONE:
            return  # past the response (see on_message_begin): not given to anyone
        code = self._parser.get_status_code()
        head = _Head(code, self._status, self._fields)
        self._events.append(head)
        if code < 200:
            return  # informational: the response proper follows
        chunked = False
        for name, value in self._fields:
            lower = name.lower()
            if lower == b"content-length":
                head.content_length = value
            elif lower == b"content-type":
                head.content_type = value
            elif lower == b"transfer-encoding":
                chunked = True
        if self._head_only:
            # No body follows a HEAD's response, whatever its headers say, and llhttp
            # cannot be told so: the exchange ends here and the connection with it.
            self._state = _DONE
            self._keep_alive = False
            self._events.append(_END)
            return
        self._state = _IN_BODY
        framed = chunked or head.content_length is not None
        self._until_close = not framed and code not in (204, 304)

    def on_body(self, body: bytes) -> None:
        if self._state == _IN_BODY:
            self._events.append(body)

    def on_message_complete(self) -> None:
        if self._state != _IN_BODY:
            return  # an informational response's end, or one past the response
        self._state = _DONE
        if not self._parser.should_keep_alive():
            self._keep_alive = False
        self._events.append(_END)


def _request_head(request: httpx2.Request) -> tuple[bytes, int | None, bool]:
    """The request's head, its Content-Length (None if it has none) and whether its
    body is chunked; `_LocalProtocolError` for what cannot be sent."""
    method = request.method.encode("ascii")
    target = request.url.raw_path
    if not _TOKEN.fullmatch(method) or not target or _TARGET_BREAKS.search(target):
        raise _LocalProtocolError(f"illegal request line: {method!r} {target!r}")
    lines = [method, b" ", target, b" HTTP/1.1\r\n"]
    length: int | None = None
    chunked = False
    for name, value in request.headers.raw:
        if not _TOKEN.fullmatch(name) or _VALUE_BREAKS.search(value):
            raise _LocalProtocolError(f"illegal header {name!r}")
        lower = name.lower()
        if lower == b"content-length":
            if not value.strip().isdigit():
                raise _LocalProtocolError(f"illegal Content-Length {value!r}")
            length = int(value)
        elif lower == b"transfer-encoding":
            if value.strip().lower() != b"chunked":
                raise _LocalProtocolError(f"unsupported Transfer-Encoding {value!r}")
            chunked = True
        lines += (name, b": ", value, b"\r\n")
    if chunked and length is not None:
        raise _LocalProtocolError("both Content-Length and Transfer-Encoding")
    lines.append(b"\r\n")
    return b"".join(lines), length, chunked


def _over_length(length: int | None, chunked: bool, sent: int) -> bool:
    """Whether `sent` bytes of body exceed what the head declared (none: no body)."""
    return not chunked and sent > (length or 0)


def _check_length(length: int | None, chunked: bool, sent: int) -> None:
    """The whole body sent matches the head's Content-Length (or its absence)."""
    if _over_length(length, chunked, sent):
        raise _LocalProtocolError("Too much data for declared Content-Length")
    if not chunked and length is not None and sent < length:
        raise _LocalProtocolError("Too little data for declared Content-Length")


def _chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data) if data else b""


class Http11Transport(httpx2.AsyncBaseTransport):
    """Direct HTTP/1.1 connections (see the module doc). `ssl_context` builds the
    context that verifies `https://` servers, called at the first TLS connection: it
    loads the CA certificates, which a process with only `http://` servers never
    needs."""

    def __init__(
        self,
        ssl_context: Callable[[], ssl.SSLContext] = httpx2.create_ssl_context,
        *,
        max_keepalive: int = 20,
        keepalive_expiry: float = 4.0,  # (see `http_clients.POOL_KEEPALIVE_SECONDS`)
    ) -> None:
        self._build_ssl_context = ssl_context
        self._ssl_context: ssl.SSLContext | None = None
        self._max_keepalive = max_keepalive
        self._expiry = keepalive_expiry
        self._idle: dict[_Origin, list[_Connection]] = {}
        # Every open connection (idle or busy), to close them all with the transport.
        self._open: set[_Connection] = set()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        scheme = url.raw_scheme
        if scheme not in (b"http", b"https"):
            raise httpx2.UnsupportedProtocol(f"unsupported URL scheme {url.scheme!r}")
        port = url.port or (443 if scheme == b"https" else 80)
        origin = (scheme, url.raw_host, port)
        timeouts = request.extensions.get("timeout", {})
        reused = self._take(origin)
        if reused is not None:
            # The server may have closed it as idle just as the request went (see above).
            replayable = request.method in _IDEMPOTENT and isinstance(
                request.stream, httpx2.ByteStream
            )
            event = await self._response_head(reused, request, timeouts, retry=replayable)
            if event is not None:
                return self._response(origin, reused, request, event)
            log.debug(
                "%s to %s://%s:%d: a reused connection closed before any response; sending again",
                request.method,
                url.scheme,
                url.host,
                port,
            )
        connection = await self._connect(request, origin, timeouts.get("connect"))
        event = await self._response_head(connection, request, timeouts, retry=False)
        assert event is not None  # only a retry gives None
        return self._response(origin, connection, request, event)

    def _response(
        self,
        origin: _Origin,
        connection: _Connection,
        request: httpx2.Request,
        event: _Head,
    ) -> httpx2.Response:
        headers = httpx2.Headers(event.headers)
        body = _Body(
            self, origin, connection, request, read_rest=_rest_is_due(request.method, event)
        )
        return httpx2.Response(
            event.status_code,
            headers=headers,
            stream=body,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": event.reason},
        )

    async def _response_head(
        self,
        connection: _Connection,
        request: httpx2.Request,
        timeouts: dict[str, float | None],
        *,
        retry: bool,
    ) -> _Head | None:
        """Sends the request on `connection` and reads its response's head. A failure
        discards the connection and raises, except, when `retry`, a close or reset
        before any byte of a response: then None (the request may go again)."""
        informed = False  # a 1xx came: the server has read the request
        try:
            with _mapped(request, httpx2.WriteError, httpx2.WriteTimeout):
                await connection.send(request, timeouts.get("write"))
            with _mapped(request, httpx2.ReadError, httpx2.ReadTimeout):
                event = await connection.next_event(timeouts.get("read"))
                while isinstance(event, _Head) and event.status_code < 200:
                    informed = True
                    event = await connection.next_event(timeouts.get("read"))
            if not isinstance(event, _Head):
                raise httpx2.RemoteProtocolError(
                    "Server disconnected without sending a response.", request=request
                )
        except (httpx2.WriteError, httpx2.ReadError, httpx2.RemoteProtocolError) as error:
            self._discard(connection)
            if retry and not informed and _closed_unanswered(connection, error):
                return None
            raise
        except BaseException:
            self._discard(connection)
            raise
        return event

    async def aclose(self) -> None:
        for connection in self._open:
            connection.close()
        self._open.clear()
        self._idle.clear()

    def _take(self, origin: _Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            connection = idle.pop()
            if connection.stale() or now - connection.idle_since > self._expiry:
                self._discard(connection)
                continue
            return connection
        return None

    async def _connect(
        self, request: httpx2.Request, origin: _Origin, timeout: float | None
    ) -> _Connection:
        scheme, host, port = origin
        context: ssl.SSLContext | None = None
        if scheme == b"https":
            if self._ssl_context is None:
                self._ssl_context = self._build_ssl_context()
            context = self._ssl_context
        name = host.decode("ascii")
        options: dict[str, Any] = {}
        # Racing addresses (a task each) only for a name, not an address, and only on
        # asyncio's own loop: uvloop's create_connection has no happy_eyeballs_delay
        # (a TypeError, even for None) and tries a name's addresses in turn.
        if not _is_address(name) and isinstance(asyncio.get_running_loop(), asyncio.BaseEventLoop):
            options["happy_eyeballs_delay"] = _HAPPY_EYEBALLS_DELAY
        with _mapped(request, httpx2.ConnectError, httpx2.ConnectTimeout):
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(
                    name,
                    port,
                    ssl=context,
                    server_hostname=name if context else None,
                    **options,
                )
        connection = _Connection(reader, writer)
        self._open.add(connection)
        return connection

    def _release(self, origin: _Origin, connection: _Connection) -> None:
        """A response was read to its end: its connection waits for the next request,
        if both sides may go on."""
        if connection.reusable():
            idle = self._idle.setdefault(origin, [])
            if len(idle) < self._max_keepalive and connection in self._open:
                connection.idle_since = time.monotonic()
                idle.append(connection)
                return
        self._discard(connection)

    def _discard(self, connection: _Connection) -> None:
        self._open.discard(connection)
        connection.close()


class _Body(httpx2.AsyncByteStream):
    """A response's body, read as it is iterated; iterating again goes on where the
    last iteration stopped. At its end the connection goes back to the pool; closed
    before it, the connection is closed, unless `read_rest` (see the module doc): then
    closing first reads what is left (bounded by `_REST_SECONDS` and `_REST_BYTES`),
    and a body that ends in time gives its connection back."""

    def __init__(
        self,
        transport: Http11Transport,
        origin: _Origin,
        connection: _Connection,
        request: httpx2.Request,
        *,
        read_rest: bool,
    ) -> None:
        self._transport = transport
        self._origin = origin
        self._connection: _Connection | None = connection
        self._request = request
        self._read_rest = read_rest

    async def __aiter__(self) -> AsyncIterator[bytes]:
        timeout = self._request.extensions.get("timeout", {}).get("read")
        while (connection := self._connection) is not None:
            try:
                with _mapped(self._request, httpx2.ReadError, httpx2.ReadTimeout):
                    event = await connection.next_event(timeout)
            except BaseException:
                self._close()
                raise
            if isinstance(event, bytes):
                yield event
            elif event is _END:
                self._connection = None
                self._transport._release(self._origin, connection)
            else:  # ConnectionClosed: the body ended with the connection
                self._close()

    async def aclose(self) -> None:
        if self._connection is not None and self._read_rest:
            left = _REST_BYTES
            try:
                async with asyncio.timeout(_REST_SECONDS):
                    async for part in self:
                        left -= len(part)
                        if left < 0:
                            break  # not ending: the connection is closed below
            except Exception:  # TimeoutError, a transport error
                pass  # not ended in time, or the connection failed: it is not reused
        self._close()

    def _close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            self._transport._discard(connection)


class _mapped:
    """Maps what a socket operation raises to httpx2's errors (`error` for an OS
    error, `timeout` for a timeout; protocol errors as httpx2's)."""

    def __init__(
        self,
        request: httpx2.Request,
        error: type[httpx2.TransportError],
        timeout: type[httpx2.TimeoutException],
    ) -> None:
        self._request = request
        self._error = error
        self._timeout = timeout

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if exc is None:
            return
        request = self._request
        message = str(exc) or type(exc).__name__
        # TimeoutError is an OSError: it is mapped first.
        if isinstance(exc, TimeoutError):
            raise self._timeout(message, request=request) from exc
        if isinstance(exc, OSError):  # ssl.SSLError included
            raise self._error(message, request=request) from exc
        if isinstance(exc, _ProtocolError):
            raise httpx2.RemoteProtocolError(message, request=request) from exc
        if isinstance(exc, _LocalProtocolError):
            raise httpx2.LocalProtocolError(message, request=request) from exc


def _closed_unanswered(connection: _Connection, error: httpx2.TransportError) -> bool:
    """Whether `error` is the server's close (its end read: a protocol error) or reset
    (an OS connection error), with not a byte of a response received."""
    if connection.received:
        return False
    if isinstance(error, httpx2.RemoteProtocolError):
        return connection.eof
    return isinstance(error.__cause__, ConnectionError)


def _rest_is_due(method: str, head: _Head) -> bool:
    """Whether what is left of a response's body, when it is closed unread, is due at
    once: a POST's event stream (it ends after the answer), or a short body of a known
    length (the SDK closes a 202 to a POSTed answer or notification unread)."""
    length = head.content_length
    if length is not None:
        return length.isdigit() and int(length) <= _REST_BYTES
    content_type = head.content_type or b""
    return method == "POST" and content_type.lower().startswith(b"text/event-stream")


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
