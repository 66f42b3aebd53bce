"""The request path of an execution's own Streamable HTTP session (legacy, or "auto").

The SDK's client stack runs a session of its own on five tasks and three memory
streams: the dispatcher's read loop, the transport's writer loop, a task (in a task
group of its own) per POST, a task per message the server sends, and the GET stream.
A paused legacy execution holds all of them while its human takes their time, and every
request goes through each layer (in a profile of the embedded kit about a third of the
harness's CPU was those layers, not HTTP). `SessionDispatcher` does what they do with
the tasks the session has anyway, on `contained_http.PostDispatcher`'s path: each
request is one POST sent and read by its caller's task through the SDK transport's own
POST handling (headers, `Mcp-Session-Id` and `MCP-Protocol-Version`, status codes, the
SSE stream and its resumption by `Last-Event-ID`, JSON-RPC models).

What a session with state on the server adds, as the SDK's dispatcher and transport do it:
- the GET stream, opened when `notifications/initialized` is sent, read (with the SDK
  transport's reconnection) by the dispatcher's own `run` task, which also answers what
  the server asks on it;
- unlike the SDK's stack, requests and notifications sent after `notifications/initialized`
  wait until the GET stream's response headers have arrived (or the GET was refused or
  failed, or `_GET_STREAM_WAIT_SECONDS` passed): a server without an event store drops
  what it sends on the GET stream while none is attached, so a tool that asks for roots
  at once would otherwise wait forever. (The SDK server registers the stream in a task
  started beside the one that sends the headers, in the same event-loop turn, so by the
  time it handles anything sent after the headers arrived, the stream is attached.)
- a request the server sends on a response stream (`elicitation/create` while a
  `tools/call` is open) is answered in a task of its own, in the caller's context, while
  the caller keeps reading the stream: a `notifications/cancelled` from the server for it
  interrupts the handler, which then answers nothing;
- a caller that stops waiting (cancelled, or its timeout) sends
  `notifications/cancelled` for its request (shielded, bounded), as the SDK's dispatcher
  does at these protocol versions; its POST is closed;
- a handler cut off by the session's end answers `CONNECTION_CLOSED`;
- a POST that fails while the session opens raises its error (the execution fails
  `server_unavailable`, "could not reach ..."); later, it fails its request
  `CONNECTION_CLOSED`;
- closing the session ends the server's session with a DELETE (`PostDispatcher.run`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import anyio
import anyio.abc
import httpx2
from mcp.shared.dispatcher import (
    CallOptions,
    coerce_request_id,
)
from mcp.shared.jsonrpc_dispatcher import (
    cancelled_request_id_from_params,
    handler_exception_to_error_data,
    progress_token_from_params,
)
from mcp.shared.message import MessageMetadata, SessionMessage
from mcp_types import (
    CONNECTION_CLOSED,
    ErrorData,
    JSONRPCError,
    JSONRPCMessage,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
    RequestId,
)

from m3grpc.harness.contained_http import PostDispatcher, _Context, _Exchange, _Sink

logger = logging.getLogger(__name__)

# Bounds of the last writes on abandon and shutdown paths (s), the SDK dispatcher's.
_ABANDON_WRITE_SECONDS = 5.0
_SHUTDOWN_WRITE_SECONDS = 1.0
# How long requests wait for the GET stream's response headers (s). On a reachable
# server they come in milliseconds; this bound only keeps a server that never answers
# the GET (or a proxy that holds it) from stalling the session for good: requests then
# go on, and what the server sends on the GET stream before it opens may be lost.
_GET_STREAM_WAIT_SECONDS = 5.0


class _Serving:
    """A request the server sent, while its handler runs."""

    __slots__ = ("answering", "context", "task")

    def __init__(self, context: _Context, task: asyncio.Task[None]) -> None:
        self.context = context
        self.task = task
        self.answering = False  # the handler returned: its answer is being POSTed


class SessionDispatcher(PostDispatcher):
    """A `PostDispatcher` for one session with state on the server (see the module doc)."""

    def __init__(self, url: str, http_client: httpx2.AsyncClient) -> None:
        super().__init__(url, http_client)
        self._initialized = anyio.Event()
        # The first GET's response headers arrived, or there will be no GET stream.
        self._get_settled = anyio.Event()
        # The requests the server sent whose handlers run, by coerced id.
        self._serving: dict[RequestId, _Serving] = {}

    async def _receive(self) -> None:
        """The GET stream, read once the session is initialized (as the SDK's transport)."""
        await self._initialized.wait()
        get_stream: Any = _GetStream(self)  # the transport only calls its send()
        client: Any = _GetClient(self._http, self._get_settled)  # only what it calls
        try:
            await self._transport.handle_get_stream(client, get_stream)
        finally:
            self._get_settled.set()  # no GET stream (any more): nothing to wait for
        await anyio.sleep_forever()

    async def _get_stream_attached(self) -> None:
        """Once the session is initialized: until the GET stream is attached on the
        server, or refused, or failed (see the module doc), at most
        `_GET_STREAM_WAIT_SECONDS` once per session."""
        if self._get_settled.is_set() or not self._initialized.is_set():
            return
        with anyio.move_on_after(_GET_STREAM_WAIT_SECONDS):
            await self._get_settled.wait()
        if not self._get_settled.is_set():
            logger.warning(
                "MCP GET stream not answered in %ss: requests go on without it",
                _GET_STREAM_WAIT_SECONDS,
            )
            self._get_settled.set()

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]:
        await self._get_stream_attached()
        return await super().send_raw_request(method, params, opts)

    def _stopped(self) -> None:
        for serving in list(self._serving.values()):
            serving.task.cancel()

    async def notify(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> None:
        if method == "notifications/initialized":
            # As the SDK's transport: the GET stream opens as this notification is sent.
            self._initialized.set()
        else:
            # What the server sends in reply may go on the GET stream, too.
            await self._get_stream_attached()
        await super().notify(method, params, opts)

    def _raises_transport_errors(self) -> bool:
        # Until the session is initialized, a POST that fails raises its error, so that
        # opening the session fails with it (`diagnostics.connect_failure`: "could not
        # reach ..."), as with the SDK's stack; after that it fails its request only.
        return not self._initialized.is_set()

    async def _abandoned(self, request_id: RequestId, reason: str, *, shield: bool) -> None:
        with anyio.move_on_after(_ABANDON_WRITE_SECONDS, shield=shield) as scope:
            await self.notify(
                "notifications/cancelled", {"requestId": request_id, "reason": reason}
            )
        if scope.cancelled_caught:
            logger.warning("courtesy cancel for request %r gave up", request_id)

    async def _ended(self, exchange: _Exchange, *, cancelled: bool) -> None:
        handlers = exchange.handlers
        if not handlers:
            return
        for serving in handlers:
            if cancelled or not serving.answering:
                # Its request's call is over: nothing will wait for its answer.
                serving.task.cancel()
        if not cancelled:
            # An answer still being POSTed (its 202) finishes before the caller goes on.
            await asyncio.gather(*(s.task for s in handlers), return_exceptions=True)

    async def _on_server_request(
        self, request: JSONRPCRequest, metadata: MessageMetadata, exchange: _Exchange | None
    ) -> None:
        """Answer in a task of its own (the caller's context), so that the response
        stream is still read while the handler waits (e.g. for a human)."""
        context = _Context(self, request.id, metadata, progress_token_from_params(request.params))
        task = asyncio.get_running_loop().create_task(self._serve(request, context))
        serving = _Serving(context, task)
        self._serving[coerce_request_id(request.id)] = serving
        if exchange is not None:
            exchange.handlers.append(serving)
        task.add_done_callback(lambda _: self._forget(request.id, serving))

    def _forget(self, request_id: RequestId, serving: _Serving) -> None:
        key = coerce_request_id(request_id)
        if self._serving.get(key) is serving:
            del self._serving[key]

    async def _serve(self, request: JSONRPCRequest, context: _Context) -> None:
        """Run the session's handler and POST its answer (none if the server cancelled
        the request; `CONNECTION_CLOSED` if the session or the call ended first)."""
        assert self._on_request is not None
        reply: JSONRPCMessage
        try:
            try:
                result = await self._on_request(context, request.method, request.params)
            finally:
                context.close()
            reply = JSONRPCResponse(jsonrpc="2.0", id=request.id, result=result)
        except asyncio.CancelledError:
            if context.cancel_requested.is_set():
                return  # the server cancelled it: it must not be answered
            closed = ErrorData(code=CONNECTION_CLOSED, message="Connection closed")
            with anyio.move_on_after(_SHUTDOWN_WRITE_SECONDS, shield=True):
                await self._post_quietly(
                    JSONRPCError(jsonrpc="2.0", id=request.id, error=closed), None
                )
            raise
        except Exception as exc:
            if context.cancel_requested.is_set():
                return
            error = handler_exception_to_error_data(exc)
            if error is None:
                logger.exception("handler for %r raised", request.method)
                error = ErrorData(code=0, message=str(exc))  # as the SDK's dispatcher answers
            reply = JSONRPCError(jsonrpc="2.0", id=request.id, error=error)
        if context.cancel_requested.is_set():
            return
        self._mark_answering(request.id)
        await self._post_quietly(reply, None)

    def _mark_answering(self, request_id: RequestId) -> None:
        serving = self._serving.get(coerce_request_id(request_id))
        if serving is not None:
            serving.answering = True

    async def _notified(self, notification: JSONRPCNotification, metadata: MessageMetadata) -> None:
        if notification.method == "notifications/cancelled":
            # The server cancels a request it sent: its handler is interrupted.
            request_id = cancelled_request_id_from_params(notification.params)
            serving = (
                None if request_id is None else self._serving.get(coerce_request_id(request_id))
            )
            if serving is not None and not serving.answering:
                serving.context.cancel_requested.set()
                serving.task.cancel()
        await super()._notified(notification, metadata)


class _GetClient:
    """The session's HTTP client as the SDK transport's GET handling gets it: it also
    sets `arrived` once a GET's response headers have come, or the GET failed. A
    redirect does not count: the GET it leads to does, or (not followed) the GET
    handling ends, which `SessionDispatcher._receive` notes."""

    def __init__(self, http: httpx2.AsyncClient, arrived: anyio.Event) -> None:
        self._http = http
        self._arrived = arrived

    def __getattr__(self, name: str) -> Any:
        return getattr(self._http, name)

    async def send(self, request: httpx2.Request, **kwargs: Any) -> httpx2.Response:
        try:
            response = await self._http.send(request, **kwargs)
        except BaseException:
            self._arrived.set()
            raise
        if not response.is_redirect:
            self._arrived.set()
        return response


class _GetStream(_Sink):
    """What the server sends on the session's GET stream."""

    def __init__(self, dispatcher: SessionDispatcher) -> None:
        self._dispatcher = dispatcher

    async def send(self, item: SessionMessage | Exception) -> None:
        if isinstance(item, Exception):
            logger.debug("MCP GET stream yielded %r", item)
            return
        message = item.message
        dispatcher = self._dispatcher
        if isinstance(message, JSONRPCRequest):
            await dispatcher._on_server_request(message, item.metadata, None)
        elif isinstance(message, JSONRPCNotification):
            # Progress of one of the session's requests goes to its caller's callback.
            token = (message.params or {}).get("progressToken")
            if message.method == "notifications/progress" and isinstance(token, str | int):
                exchange = dispatcher._exchanges.get(coerce_request_id(token))
                if exchange is not None:
                    await exchange._progress(message)
            await dispatcher._notified(message, item.metadata)
        else:
            # An answer on the GET stream: its request's, if that is still waiting.
            exchange = (
                None
                if message.id is None
                else dispatcher._exchanges.get(coerce_request_id(message.id))
            )
            if exchange is not None:
                await exchange.send(item)
            else:
                logger.debug("dropped a response to request %r", message.id)


__all__ = ["SessionDispatcher"]
