"""`PostDispatcher` (m3grpc/harness/contained_http.py), the request path of a shared
2026-07-28 session, against real MCP servers over Streamable HTTP: what the server sends
on a request's response stream reaches the session in the caller's own context before
the answer, the server's errors are the caller's, and a POST that fails fails only its
request."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, nullcontext
from typing import Any, Final

import anyio
import pytest
from mcp import MCPError
from mcp.shared import _otel
from mcp.shared.dispatcher import DispatchContext
from mcp.shared.transport_context import TransportContext
from mcp_types import CONNECTION_CLOSED, URL_ELICITATION_REQUIRED
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from m3grpc.harness import contained_http
from m3grpc.harness.contained_http import PostDispatcher
from m3grpc.harness.http_clients import HttpClients
from tests.support.mcp_processes import free_port, http_mcp_server

MRTR: Final = "2026-07-28"
caller: contextvars.ContextVar[str] = contextvars.ContextVar("caller")


def call(name: str, arguments: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """A 2026-07-28 `tools/call`'s params and headers, as the SDK's session stamps them."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": MRTR,
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}, "url": {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
    }
    headers = {"mcp-protocol-version": MRTR, "mcp-method": "tools/call", "mcp-name": name}
    return {"name": name, "arguments": dict(arguments), "_meta": meta}, headers


class Received:
    """What the server sent on response streams, with the caller it came to."""

    def __init__(self) -> None:
        self.notifications: list[tuple[str, str, Mapping[str, Any] | None]] = []

    async def on_request(
        self, ctx: DispatchContext[TransportContext], method: str, params: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        raise AssertionError(f"the server sent a request: {method}")

    async def on_notify(
        self, ctx: DispatchContext[TransportContext], method: str, params: Mapping[str, Any] | None
    ) -> None:
        self.notifications.append((caller.get("nobody"), method, params))


@asynccontextmanager
async def running(url: str, received: Received) -> AsyncIterator[PostDispatcher]:
    async with HttpClients().client({}, shared=True) as http:
        dispatcher = PostDispatcher(url, http)
        async with anyio.create_task_group() as tg:
            await tg.start(dispatcher.run, received.on_request, received.on_notify)
            yield dispatcher
            tg.cancel_scope.cancel()


async def test_notifications_on_a_response_reach_the_caller_before_its_answer() -> None:
    received = Received()
    with http_mcp_server("url_required", "mrtr") as url:
        async with running(url, received) as dispatcher:
            params, headers = call("open_vault", {"vault": "a"})
            with pytest.raises(MCPError) as required:
                await dispatcher.send_raw_request("tools/call", params, {"headers": headers})
            assert required.value.code == URL_ELICITATION_REQUIRED  # the server's own error
            assert received.notifications == []

            caller.set("execution b")
            params, headers = call("open_vault", {"vault": "b"})
            result = await dispatcher.send_raw_request("tools/call", params, {"headers": headers})
            # Already recorded when the answer came back, in the context of its caller.
            assert received.notifications == [
                (
                    "execution b",
                    "notifications/elicitation/complete",
                    {"elicitationId": "vault-login"},
                )
            ]
    assert result["content"][0]["text"] == "vault b opened"


async def test_a_post_that_fails_fails_its_request_only() -> None:
    received = Received()
    url = f"http://127.0.0.1:{free_port()}/mcp"  # nothing listens there
    async with running(url, received) as dispatcher:
        params, headers = call("open_vault", {})
        for _ in range(2):  # the dispatcher carries on after a failed POST
            with pytest.raises(MCPError) as failed:
                await dispatcher.send_raw_request("tools/call", params, {"headers": headers})
            assert failed.value.code == CONNECTION_CLOSED
            assert "HTTP request to the MCP server failed: ConnectError" in failed.value.message


async def test_a_closed_dispatcher_refuses_requests() -> None:
    received = Received()
    with http_mcp_server("url_required", "mrtr") as url:
        async with running(url, received) as dispatcher:
            pass
        params, headers = call("open_vault", {})
        with pytest.raises(MCPError) as closed:
            await dispatcher.send_raw_request("tools/call", params, {"headers": headers})
    assert closed.value.code == CONNECTION_CLOSED


@asynccontextmanager
async def answering(body: bytes) -> AsyncIterator[str]:
    """A server on loopback that answers every POST with the JSON `body` (a server
    that misbehaves; the SDK's own servers don't)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        await reader.readexactly(length)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body)
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}/mcp"


@pytest.mark.parametrize(
    ("body", "code", "message"),
    [
        # An error the server could not tie to the request (no id) is still its answer.
        (
            b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"bad envelope"}}',
            -32600,
            "bad envelope",
        ),
        # An answer to another request: this one's never comes (not a wait forever).
        (
            b'{"jsonrpc":"2.0","id":999,"result":{}}',
            CONNECTION_CLOSED,
            "the server's response carried no answer",
        ),
    ],
)
async def test_a_response_without_this_requests_answer_fails_it(
    body: bytes, code: int, message: str
) -> None:
    async with answering(body) as url, running(url, Received()) as dispatcher:
        params, headers = call("open_vault", {})
        with pytest.raises(MCPError) as failed:
            await asyncio.wait_for(
                dispatcher.send_raw_request("tools/call", params, {"headers": headers}), 30
            )
    assert (failed.value.code, failed.value.message) == (code, message)


# -- the SDK's client span -------------------------------------------------------------


def _sent_meta(span: Any) -> dict[str, Any]:
    """The `_meta` a request gets inside `span`, as the dispatcher fills it."""
    meta: dict[str, Any] = {}
    with span:
        _otel.inject_trace_context(meta)
    return meta


@pytest.mark.parametrize("ambient", [False, True])
def test_without_a_tracer_provider_a_request_carries_what_the_sdks_span_would_carry(
    monkeypatch: pytest.MonkeyPatch, ambient: bool
) -> None:
    """No provider set: no span is opened, and `_meta` is what it is under the SDK's
    no-op span: the caller's remote trace context if there is one, else nothing."""
    monkeypatch.setattr(contained_http, "get_tracer_provider", trace.ProxyTracerProvider)
    monkeypatch.setattr(_otel, "_tracer", trace.NoOpTracer())  # what a proxy without one uses
    remote = trace.SpanContext(
        trace_id=0x0AF7651916CD43DD8448EB211C80319C,
        span_id=0xB7AD6B7169203331,
        is_remote=True,
        trace_flags=trace.TraceFlags(1),
    )
    token = (
        otel_context.attach(trace.set_span_in_context(trace.NonRecordingSpan(remote)))
        if ambient
        else None
    )
    try:
        sdk_span = _otel.otel_span(
            "MCP send tools/call x",
            kind=SpanKind.CLIENT,
            attributes={"mcp.method.name": "tools/call", "jsonrpc.request.id": "7"},
        )
        expected = _sent_meta(sdk_span)
        skipped = contained_http._client_span("tools/call", "x", 7)
        assert isinstance(skipped, nullcontext)  # no span at all
        assert _sent_meta(skipped) == expected
    finally:
        if token is not None:
            otel_context.detach(token)
    if ambient:
        assert expected["traceparent"] == "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    else:
        assert "traceparent" not in expected


def test_with_a_tracer_provider_a_request_gets_the_sdks_client_span(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    monkeypatch.setattr(contained_http, "get_tracer_provider", lambda: provider)
    monkeypatch.setattr(_otel, "_tracer", provider.get_tracer("mcp-python-sdk"))
    meta = _sent_meta(contained_http._client_span("tools/call", "book_shipment", 3))
    (span,) = exported.get_finished_spans()
    assert span.name == "MCP send tools/call book_shipment"
    assert span.kind == SpanKind.CLIENT
    assert dict(span.attributes or {}) == {
        "mcp.method.name": "tools/call",
        "jsonrpc.request.id": "3",
    }
    context = span.context
    assert context is not None
    assert meta["traceparent"] == (
        f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
    )
