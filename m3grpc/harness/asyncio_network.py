"""httpcore2's connections on asyncio streams, without anyio's per-call layers.

Each session's own pool with an `https://` MCP server (`http_clients`; sessions with
`http://` ones share `http11_transport`'s, which also uses `ReadToEnd` below).

httpx2's default network backend (httpcore2's AnyIO backend) opens every
connection through anyio's happy-eyeballs task group and wraps every read and
write in a new cancel scope (`fail_after`, also when there is no timeout). A
Streamable HTTP session makes several requests, a legacy one several
connections (the SDK closes a POST's event stream once its answer arrives, so
that connection is not reused): in a profile of `m3grpc serve` that layer was
about a sixth of the service's CPU on the legacy generation. This backend does
the same on asyncio's own streams: a timeout only where one is set (reads have
none, see `http_clients`), errors mapped to httpcore2's as its backends do.

A POST answered with an event stream gives its connection back for the next
request: the SDK stops reading such a stream at the answer it waited for and
closes it, and a response closed before its end costs its connection (a legacy
session opened one per request, seven). The server ends that stream right after
the answer, so closing reads what is left of it first (briefly, boundedly). So does
closing a short body of a known length (the SDK closes the 202 to a POSTed answer or
notification without reading its empty body).

Only for an asyncio event loop (M3's runtime runs on one); cancellation by the
SDK's anyio cancel scopes works as for any asyncio await.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections.abc import AsyncIterator, Coroutine, Iterable
from typing import Any

import httpcore2
import httpx2
from httpcore2 import SOCKET_OPTION, AsyncNetworkBackend, AsyncNetworkStream
from httpx2 import AsyncByteStream

# RFC 8305's connection attempt delay, as anyio's connect_tcp uses.
HAPPY_EYEBALLS_DELAY = 0.25
# What is read of a POST's event stream, when it is closed, to reuse its connection:
# the server's end of the stream is due right after the answer; anything more
# (a server that keeps the stream open) costs the connection, as it did before.
_REST_SECONDS = 0.5
_REST_BYTES = 64 * 1024


class AsyncioStream(AsyncNetworkStream):
    """One TCP (or TLS) connection on an asyncio stream pair."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    # Errors are mapped to httpcore2's as its own backends map them (TimeoutError
    # is an OSError: it is caught first). No timer is set without a timeout.

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            if timeout is None:
                return await self._reader.read(max_bytes)  # b"" at the end, as expected
            async with asyncio.timeout(timeout):
                return await self._reader.read(max_bytes)
        except TimeoutError as exc:
            raise httpcore2.ReadTimeout(exc) from exc
        except OSError as exc:
            raise httpcore2.ReadError(exc) from exc

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        try:
            if self._writer.is_closing():
                raise ConnectionResetError("the connection is closed")
            self._writer.write(buffer)
            if not self._writer.transport.get_write_buffer_size():
                return  # all of it went to the socket: nothing to wait for
            async with asyncio.timeout(timeout):
                await self._writer.drain()
        except TimeoutError as exc:
            raise httpcore2.WriteTimeout(exc) from exc
        except OSError as exc:
            raise httpcore2.WriteError(exc) from exc

    async def aclose(self) -> None:
        # Flushes what is buffered, then closes; the loop finishes it without us.
        self._writer.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                await self._writer.start_tls(ssl_context, server_hostname=server_hostname)
        except BaseException as exc:
            self._writer.transport.abort()
            if isinstance(exc, TimeoutError):
                raise httpcore2.ConnectTimeout(exc) from exc
            if isinstance(exc, OSError):  # ssl.SSLError included
                raise httpcore2.ConnectError(exc) from exc
            raise
        return self

    def get_extra_info(self, info: str) -> Any:
        transport = self._writer.transport
        if info == "ssl_object":
            return transport.get_extra_info("ssl_object")
        if info == "client_addr":
            return transport.get_extra_info("sockname")
        if info == "server_addr":
            return transport.get_extra_info("peername")
        if info == "socket":
            return transport.get_extra_info("socket")
        if info == "is_readable":
            # Asked of an idle kept-alive connection: anything the server sent
            # since (data, its close, a reset) means it must not be reused.
            # asyncio reads the socket as data arrives, so ask the stream.
            return (
                self._reader.at_eof()
                or self._reader.exception() is not None
                or transport.is_closing()
                or bool(getattr(self._reader, "_buffer", b""))
            )
        return None


class AsyncioBackend(AsyncNetworkBackend):
    """Connections for httpcore2 on asyncio streams (see the module doc)."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SOCKET_OPTION] | None = None,
    ) -> AsyncNetworkStream:
        # asyncio sets TCP_NODELAY on TCP sockets, as the AnyIO backend has it.
        return await _connected(
            asyncio.open_connection(
                host,
                port,
                local_addr=None if local_address is None else (local_address, 0),
                # Racing addresses (a task each) only for a name, not an address.
                happy_eyeballs_delay=None if is_address(host) else HAPPY_EYEBALLS_DELAY,
            ),
            timeout,
            socket_options,
        )

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[SOCKET_OPTION] | None = None,
    ) -> AsyncNetworkStream:
        return await _connected(asyncio.open_unix_connection(path), timeout, socket_options)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


async def _connected(
    opening: Coroutine[Any, Any, tuple[asyncio.StreamReader, asyncio.StreamWriter]],
    timeout: float | None,
    options: Iterable[SOCKET_OPTION] | None,
) -> AsyncioStream:
    """The stream `opening` opens within `timeout`, with `options` set on its socket;
    its failures as httpcore2's connect errors."""
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await opening
    except TimeoutError as exc:
        raise httpcore2.ConnectTimeout(exc) from exc
    except OSError as exc:
        raise httpcore2.ConnectError(exc) from exc
    _apply(writer, options)
    return AsyncioStream(reader, writer)


def is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _apply(writer: asyncio.StreamWriter, options: Iterable[SOCKET_OPTION] | None) -> None:
    sock: socket.socket | None = writer.transport.get_extra_info("socket")
    if sock is None:
        return
    for option in options or ():
        sock.setsockopt(*option)


# httpx2's default limits (its AsyncHTTPTransport's).
LIMITS = httpx2.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=5.0)


class AsyncioTransport(httpx2.AsyncHTTPTransport):
    """httpx2's transport for direct connections, its pool on `AsyncioBackend`.

    `ssl_context` None: for a server reached without TLS (an `http://` URL), so that
    no CA certificates are loaded for it; should a request still go to an `https://`
    URL, httpcore2 verifies it with its default context."""

    def __init__(self, ssl_context: ssl.SSLContext | None, limits: httpx2.Limits = LIMITS) -> None:
        # Not httpx2's __init__: all it does is build this pool (on its own backend,
        # with an SSL context it would build when given none).
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=AsyncioBackend(),
        )

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await super().handle_async_request(request)
        stream = response.stream
        if isinstance(stream, AsyncByteStream) and rest_is_due(request, response):
            response.stream = ReadToEnd(stream)
        return response


def rest_is_due(request: httpx2.Request, response: httpx2.Response) -> bool:
    """Whether what is left of `response`'s body, when it is closed unread, is due at
    once: a POST's event stream (it ends after the answer), or a short body of a known
    length (the SDK closes a 202 to a POSTed answer or notification unread)."""
    length = response.headers.get("content-length")
    if length is not None:
        return length.isdigit() and int(length) <= _REST_BYTES
    content_type = response.headers.get("content-type", "")
    return request.method == "POST" and content_type.lower().startswith("text/event-stream")


class ReadToEnd(AsyncByteStream):
    """A response body that, closed before its end, reads the rest first (bounded
    by `_REST_SECONDS` and `_REST_BYTES`), so that its connection can be reused."""

    def __init__(self, stream: httpx2.AsyncByteStream) -> None:
        self._stream = stream
        self._ended = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for part in self._stream:
            yield part
        self._ended = True  # read to its end: nothing is left to read

    async def aclose(self) -> None:
        if self._ended:
            await self._stream.aclose()
            return
        try:
            left = _REST_BYTES
            async with asyncio.timeout(_REST_SECONDS):
                async for part in self._stream:
                    left -= len(part)
                    if left < 0:
                        break  # not ending: the connection is closed with the response
        except Exception:  # TimeoutError, a transport error, a stream already failed
            pass  # not ended in time, or the connection failed: it is not reused
        finally:
            await self._stream.aclose()
