"""The MCP sessions' HTTP clients (m3grpc/harness/http_clients.py).

Against real HTTP/1.1 servers on loopback: without proxies the sessions of a loop
share its pool (`http://` and `https://` servers alike), the SSL context is built
only for an `https://` server; with proxies each client has httpx2's own transport.
"""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx2
import pytest

from m3grpc.harness import http_clients
from m3grpc.harness.http_clients import HttpClients
from tests.harness.test_http11_transport import Server, server_tls, serving
from tests.support.certs import Authority

PROXIES = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY")


async def test_the_sessions_of_a_loop_share_its_connections(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in PROXIES:
        monkeypatch.delenv(name, raising=False)
    server = Server()
    clients = HttpClients()
    async with serving(server) as url:
        async with clients.client({"x-test": "1"}) as http:
            first = await http.get(url)
            second = await http.post(url, json={"jsonrpc": "2.0"})
        # Another session of the loop takes the connection the first one left (closing
        # a session's client leaves the loop's pool open).
        async with clients.client({"x-test": "2"}, shared=True) as http:
            third = await http.get(url)
        await clients.aclose()

    assert [(r.status_code, r.text) for r in (first, second, third)] == [(200, "ok 1")] * 3
    assert server.connections == 1


async def test_an_https_server_shares_the_pool_and_only_it_costs_an_ssl_context(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Building the process's SSL context loads the CA certificates (~1.4 MB of RSS):
    # only a connection to an https:// server asks for it.
    for name in PROXIES:
        monkeypatch.delenv(name, raising=False)
    authority = Authority.create(tmp_path / "ca")
    trusting = ssl.create_default_context(cafile=str(authority.cert))
    built: list[ssl.SSLContext] = []

    def counted() -> ssl.SSLContext:
        built.append(trusting)
        return trusting

    monkeypatch.setattr(http_clients, "shared_ssl_context", counted)
    clients = HttpClients()
    server = Server()
    async with serving(Server()) as plain, serving(server, server_tls(authority)) as url:
        async with clients.client({}) as http:
            answer = await http.get(plain)
        assert (answer.status_code, answer.text) == (200, "ok 1")
        assert built == []

        for _ in range(2):
            async with clients.client({}) as http:
                answer = await http.get(url)
            assert (answer.status_code, answer.text) == (200, "ok 1")
        await clients.aclose()
    assert built == [trusting]
    assert server.connections == 1


async def test_with_proxies_in_the_environment_httpx2_keeps_its_own_transport(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    async with HttpClients().client({}) as http:
        assert isinstance(http._transport, httpx2.AsyncHTTPTransport)
