"""What Streamable HTTP sessions share: the SSL context, the connections, the discover answer.

Building an `httpx2.AsyncClient` builds an SSL context and loads the system's CA
certificates (tens of milliseconds of CPU), even for a plain `http://` URL; one per
execution made that most of an execution's cost. Every session gets its own client
(its own headers and cookies), but all of them share one SSL context per process, so
a client costs next to nothing to build.

Without proxies in the environment, the sessions of an event loop also share its
connections: one pool per loop (idle connections by scheme, host and port, `http://`
and `https://` servers alike), HTTP/1.1 by httptools on asyncio's streams
(`http11_transport`). A session's own pool made every legacy execution open three or
four TCP connections (its handshake, its GET stream, its call, the answers it POSTs
while the call runs); from the shared pool a request takes any idle connection to its
server. The pool has no cap on connections: a request never waits for another
execution's long call (a shared session's, see `shared_sessions`, included). The
pool builds the SSL context only at its first `https://` connection. Closing a
session's client leaves the pool open; the pool closes with the harness
(`HttpClients.aclose`, when the runtime stops). With proxies, each session's client
has httpx2's own pool.

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

from m3grpc.harness.http11_transport import Http11Transport

# Connect/write/pool timeout for Streamable HTTP; reads never time out (see above).
HTTP_TIMEOUT_SECONDS = 30.0
# Idle connections kept per server for the next requests, and for how long (s): an
# event loop's pool, and through proxies each session's. Below uvicorn's and Node's
# 5 s idle timeout (httpx2's default is 5 s too): a server's idle clock starts as it
# sends a response's end, ours a moment later as we read it, so at 5 s we would
# reuse connections just as those servers close them. Under a shorter server timeout
# (gunicorn's 2 s, a proxy's) a POST sent as the server closes can still fail; the
# pool sends only idempotent requests again (`http11_transport`; not through proxies:
# httpx2's pools do not).
POOL_MAX_KEEPALIVE = 20
POOL_KEEPALIVE_SECONDS = 4.0
# Through proxies, a session's connections: at most httpx2's default 100 at once, but a
# shared session's as many as its executions' requests need (a paused legacy call
# holds its connection for as long as a human takes).
PROXIED_LIMITS = httpx2.Limits(
    max_connections=100,
    max_keepalive_connections=POOL_MAX_KEEPALIVE,
    keepalive_expiry=POOL_KEEPALIVE_SECONDS,
)
SHARED_LIMITS = httpx2.Limits(
    max_connections=None,
    max_keepalive_connections=POOL_MAX_KEEPALIVE,
    keepalive_expiry=POOL_KEEPALIVE_SECONDS,
)

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
        # Each event loop's pool, shared by its sessions' clients.
        self._pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Http11Transport] = (
            weakref.WeakKeyDictionary()
        )

    def client(self, headers: Mapping[str, str], *, shared: bool = False) -> httpx2.AsyncClient:
        """A new client for one session; the caller closes it. Without proxies it takes
        its connections from the pool of the loop it runs on (closing it leaves them
        open). Through proxies it has a pool of its own; a `shared` session's (several
        executions' requests, see `shared_sessions`) has no cap on its connections."""
        timeout = httpx2.Timeout(HTTP_TIMEOUT_SECONDS, read=None)
        if urllib.request.getproxies():
            # httpx2 routes through the environment's proxies (its own transports).
            return httpx2.AsyncClient(
                headers=dict(headers),
                timeout=timeout,
                verify=shared_ssl_context(),
                limits=SHARED_LIMITS if shared else PROXIED_LIMITS,
            )
        return httpx2.AsyncClient(headers=dict(headers), timeout=timeout, transport=_Borrowed(self))

    def _pool(self) -> Http11Transport:
        loop = asyncio.get_running_loop()
        pool = self._pools.get(loop)
        if pool is None:
            pool = self._pools[loop] = Http11Transport(
                shared_ssl_context,
                max_keepalive=POOL_MAX_KEEPALIVE,
                keepalive_expiry=POOL_KEEPALIVE_SECONDS,
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
    """A session's view of its loop's pool, taken at its first request (a client runs
    on one loop): closing the session's client does not close the pool."""

    def __init__(self, clients: HttpClients) -> None:
        self._clients = clients
        self._pool: Http11Transport | None = None

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if self._pool is None:
            self._pool = self._clients._pool()
        return await self._pool.handle_async_request(request)

    async def aclose(self) -> None:
        pass  # the pool closes with the harness (`HttpClients.aclose`)


def binding_key(url: str, headers: Mapping[str, str]) -> tuple[str, HeadersKey]:
    """What identifies an HTTP binding's server to the process: its URL and headers."""
    return (url, tuple(sorted(headers.items())))
