"""What Streamable HTTP sessions share: the SSL context, the connections, the discover answer.

Building an `httpx2.AsyncClient` builds an SSL context and loads the system's CA
certificates (tens of milliseconds of CPU), even for a plain `http://` URL; one per
execution made that most of an execution's cost. Every session gets its own client
(its own headers and cookies), but all of them share one SSL context per process, so
a client costs next to nothing to build.

Without proxies in the environment, the sessions of an event loop that reach
`http://` servers also share its connections: one pool per loop (idle connections by
scheme, host and port), HTTP/1.1 by h11 on asyncio's streams (`http11_transport`). A
session's own pool made every legacy execution open three or four TCP connections
(its handshake, its GET stream, its call, the answers it POSTs while the call runs);
from the shared pool a request takes any idle connection to its server. Closing a
session's client leaves the pool open; the pool closes with the harness
(`HttpClients.aclose`, when the runtime stops). A session with an `https://` server
keeps a pool of its own (httpcore2's on asyncio's streams, `asyncio_network`): shared
by a loop's sessions, that pool's scans of every connection it holds (two per paused
legacy execution) made 1,000 paused executions slower to pause and answer than one
pool each. With proxies, each session's client has httpx2's own pool.

It also remembers a 2026-07-28 server's `server/discover` answer per (URL, headers), so
later sessions adopt it instead of asking again (the SDK's `prior_discover`); the harness
forgets it when a session of that binding fails to connect or loses its connection.

Reads never time out: a legacy round holds its call's response stream open for as long
as a human takes (the SDK's default 300 s read timeout would cut it).
"""

from __future__ import annotations

import asyncio
import ssl
import threading
import urllib.request
import weakref
from collections.abc import Mapping

import httpx2
from mcp_types import DiscoverResult

from m3grpc.harness.asyncio_network import LIMITS, AsyncioTransport
from m3grpc.harness.http11_transport import Http11Transport

# Connect/write/pool timeout for Streamable HTTP; reads never time out (see above).
HTTP_TIMEOUT_SECONDS = 30.0
# A shared session's connections: as many at once as its executions' requests need
# (a paused legacy call holds its connection for as long as a human takes).
SHARED_LIMITS = httpx2.Limits(
    max_connections=None,
    max_keepalive_connections=LIMITS.max_keepalive_connections,
    keepalive_expiry=LIMITS.keepalive_expiry,
)

# Idle connections an event loop keeps per `http://` server for its next requests, and
# for how long (s).
POOL_MAX_KEEPALIVE = 20
POOL_KEEPALIVE_SECONDS = 5.0

_ssl_lock = threading.Lock()
_ssl_context: ssl.SSLContext | None = None


def shared_ssl_context() -> ssl.SSLContext:
    """The process's one client SSL context (httpx's default verification settings)."""
    global _ssl_context
    with _ssl_lock:
        if _ssl_context is None:
            _ssl_context = httpx2.create_ssl_context()
        return _ssl_context


HeadersKey = tuple[tuple[str, str], ...]


class HttpClients:
    """New HTTP clients on the shared SSL context and each event loop's connection
    pools, and the remembered discover answers."""

    def __init__(self) -> None:
        self._discovered: dict[tuple[str, HeadersKey], DiscoverResult] = {}
        # Each event loop's pool for `http://` servers, shared by its sessions' clients.
        self._pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Http11Transport] = (
            weakref.WeakKeyDictionary()
        )

    def client(
        self, headers: Mapping[str, str], *, url: str | None = None, shared: bool = False
    ) -> httpx2.AsyncClient:
        """A new client for one session; the caller closes it. `url`: the server's; for
        an `http://` one (direct, no proxy) the client takes its connections from the
        running loop's pool (closing the client leaves them open) and the process builds
        no SSL context (it loads the CA certificates). Otherwise the client has a pool
        of its own; a `shared` session's (several executions' requests, see
        `shared_sessions`) has no cap on its connections: a request never waits for
        another execution's long call."""
        timeout = httpx2.Timeout(HTTP_TIMEOUT_SECONDS, read=None)
        limits = SHARED_LIMITS if shared else LIMITS
        if urllib.request.getproxies():
            # httpx2 routes through the environment's proxies (its own transports).
            return httpx2.AsyncClient(
                headers=dict(headers), timeout=timeout, verify=shared_ssl_context(), limits=limits
            )
        transport: httpx2.AsyncBaseTransport
        if url is not None and httpx2.URL(url).scheme == "http":
            transport = _Borrowed(self._pool())
        else:
            # Direct connections on asyncio's streams (see asyncio_network).
            transport = AsyncioTransport(shared_ssl_context(), limits)
        return httpx2.AsyncClient(headers=dict(headers), timeout=timeout, transport=transport)

    def _pool(self) -> Http11Transport:
        loop = asyncio.get_running_loop()
        pool = self._pools.get(loop)
        if pool is None:
            pool = self._pools[loop] = Http11Transport(
                None, max_keepalive=POOL_MAX_KEEPALIVE, keepalive_expiry=POOL_KEEPALIVE_SECONDS
            )
        return pool

    async def aclose(self) -> None:
        """Close the running loop's pool (its idle connections; a response still open
        closes its connection when it is closed)."""
        pool = self._pools.pop(asyncio.get_running_loop(), None)
        if pool is not None:
            await pool.aclose()

    def discovered(self, url: str, headers: Mapping[str, str]) -> DiscoverResult | None:
        """The server's remembered `server/discover` answer, if any."""
        return self._discovered.get(binding_key(url, headers))

    def remember_discovered(
        self, url: str, headers: Mapping[str, str], result: DiscoverResult
    ) -> None:
        self._discovered[binding_key(url, headers)] = result

    def forget_discovered(self, url: str, headers: Mapping[str, str]) -> None:
        self._discovered.pop(binding_key(url, headers), None)


class _Borrowed(httpx2.AsyncBaseTransport):
    """A session's view of its loop's pool: closing the session's client does not
    close the pool."""

    def __init__(self, pool: Http11Transport) -> None:
        self._pool = pool

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        return await self._pool.handle_async_request(request)

    async def aclose(self) -> None:
        pass  # the pool closes with the harness (`HttpClients.aclose`)


def binding_key(url: str, headers: Mapping[str, str]) -> tuple[str, HeadersKey]:
    """What identifies an HTTP binding's server to the process: its URL and headers."""
    return (url, tuple(sorted(headers.items())))
