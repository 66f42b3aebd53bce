"""One HTTP client (and connection pool) per Streamable HTTP binding, shared by executions.

Building an `httpx2.AsyncClient` builds an SSL context and loads the system's CA
certificates (tens of milliseconds of CPU), even for a plain `http://` URL: one client
per execution made that most of an execution's cost. `HttpClients` keeps one client per
event loop and per set of binding headers (the SDK sends the session's own headers with
each request, so executions can share a client), and one SSL context per process.

It also remembers a 2026-07-28 server's `server/discover` answer per (URL, headers), so
later sessions adopt it instead of asking again (the SDK's `prior_discover`); the harness
forgets it when a session of that binding fails to connect or loses its connection.

A shared client has no connection cap: a legacy round holds its call's response
stream open for as long as a human takes, so N paused executions hold N connections.
Reads never time out for the same reason (the SDK's default 300 s read timeout would
cut a held legacy elicitation stream).
"""

from __future__ import annotations

import ssl
import threading
import weakref
from asyncio import AbstractEventLoop, get_running_loop
from collections.abc import Mapping

import httpx2
from mcp_types import DiscoverResult

# Connect/write/pool timeout for Streamable HTTP; reads never time out (see above).
HTTP_TIMEOUT_SECONDS = 30.0
# Idle keep-alive connections kept per client (busy ones are never capped).
_KEEPALIVE_CONNECTIONS = 256
_KEEPALIVE_SECONDS = 30.0

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
    """Shared `httpx2.AsyncClient`s: one per (running event loop, binding headers)."""

    def __init__(self) -> None:
        # A client's pool belongs to the loop it was used on; a loop that is gone
        # takes its clients with it.
        self._by_loop: weakref.WeakKeyDictionary[
            AbstractEventLoop, dict[HeadersKey, httpx2.AsyncClient]
        ] = weakref.WeakKeyDictionary()
        self._discovered: dict[tuple[str, HeadersKey], DiscoverResult] = {}

    def discovered(self, url: str, headers: Mapping[str, str]) -> DiscoverResult | None:
        """The server's remembered `server/discover` answer, if any."""
        return self._discovered.get((url, _key(headers)))

    def remember_discovered(
        self, url: str, headers: Mapping[str, str], result: DiscoverResult
    ) -> None:
        self._discovered[(url, _key(headers))] = result

    def forget_discovered(self, url: str, headers: Mapping[str, str]) -> None:
        self._discovered.pop((url, _key(headers)), None)

    def client(self, headers: Mapping[str, str]) -> httpx2.AsyncClient:
        """The running loop's client for `headers` (created on first use)."""
        clients = self._by_loop.setdefault(get_running_loop(), {})
        key = _key(headers)
        client = clients.get(key)
        if client is None or client.is_closed:
            client = httpx2.AsyncClient(
                headers=dict(headers),
                timeout=httpx2.Timeout(HTTP_TIMEOUT_SECONDS, read=None),
                limits=httpx2.Limits(
                    max_connections=None,
                    max_keepalive_connections=_KEEPALIVE_CONNECTIONS,
                    keepalive_expiry=_KEEPALIVE_SECONDS,
                ),
                verify=shared_ssl_context(),
            )
            clients[key] = client
        return client

    async def aclose(self) -> None:
        """Close the running loop's clients (idle connections; a later use reopens)."""
        clients = self._by_loop.pop(get_running_loop(), {})
        for client in clients.values():
            await client.aclose()


def _key(headers: Mapping[str, str]) -> HeadersKey:
    return tuple(sorted(headers.items()))
