"""A Streamable HTTP client transport on which one request's HTTP failure fails only that request.

The SDK's transport runs each request's POST as a task of the transport's task group,
and an HTTP error that escapes a POST (the server unreachable, the connection reset)
ends the group and with it the whole session: every other request in flight fails
too. For a session that one execution owns that is the same thing. A session that
several executions share (`m3grpc.harness.shared_sessions`, 2026-07-28 bindings)
must not let one request's failure end the others' calls, so here the failure is the
request's own: it is answered with a JSON-RPC `CONNECTION_CLOSED` error, as the SDK
answers a request whose response stream ended, and the session carries on (the next
request opens a new connection).

Everything else is the SDK's transport (`StreamableHTTPTransport`, its POST writer and
its 2026-07-28 cancellation, which aborts the cancelled request's POST).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import httpx2
from mcp.client._transport import TransportStreams
from mcp.client.streamable_http import RequestContext, StreamableHTTPTransport
from mcp.shared._context_streams import create_context_streams
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCRequest

logger = logging.getLogger(__name__)


class _ContainedTransport(StreamableHTTPTransport):
    async def _handle_post_request(self, ctx: RequestContext) -> None:
        try:
            await super()._handle_post_request(ctx)
        except Exception as exc:  # httpx2.TransportError and anything else one POST raises
            message = ctx.session_message.message
            if not isinstance(message, JSONRPCRequest):
                raise
            reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if not isinstance(exc, httpx2.TransportError):
                logger.warning("MCP request %r failed in the transport", message.id, exc_info=True)
            await self._resolve_abandoned_request(
                ctx.read_stream_writer,
                message.id,
                f"HTTP request to the MCP server failed: {reason}",
            )


@asynccontextmanager
async def contained_http_transport(
    url: str, http_client: httpx2.AsyncClient
) -> AsyncIterator[TransportStreams]:
    """The read and write streams of a Streamable HTTP session at `url` on `http_client`
    (which the caller owns and closes). Opens no GET stream and sends no DELETE unless
    the server hands out a session id (2026-07-28 servers do not)."""
    transport = _ContainedTransport(url)
    read_writer, read_stream = create_context_streams[SessionMessage | Exception](0)
    write_stream, write_reader = create_context_streams[SessionMessage](0)
    async with (
        read_writer,
        read_stream,
        write_stream,
        write_reader,
        anyio.create_task_group() as tg,
    ):

        def start_get_stream() -> None:
            tg.start_soon(transport.handle_get_stream, http_client, read_writer)

        tg.start_soon(
            transport.post_writer,
            http_client,
            write_reader,
            read_writer,
            write_stream,
            start_get_stream,
            tg,
        )
        try:
            yield read_stream, write_stream
        finally:
            if transport.session_id:
                await transport.terminate_session(http_client)
            tg.cancel_scope.cancel()
