"""The request path of a shared 2026-07-28 session: each request one POST, sent by its caller.

The SDK's client stack sends a request through three layers of tasks and memory
streams: the session hands it to its `JSONRPCDispatcher`, which writes it to the
transport's stream; the transport's writer loop starts a task (in a task group of its
own) that POSTs it; the answer travels back through the read stream to the dispatcher's
loop, which wakes the waiting caller. For a 2026-07-28 request none of that is needed:
the request is its POST, and the POST's response (JSON, or an SSE stream that ends with
the answer) carries everything about it. `PostDispatcher` is an SDK `Dispatcher` on which
the caller's own task sends the POST and reads its response, through the SDK transport's
own POST handling (`StreamableHTTPTransport._handle_post_request`: its headers, status
codes, redirects, JSON and SSE parsing with the SDK's JSON-RPC models). The session above
it (`ClientSession`: stamping `MCP-Protocol-Version`/`Mcp-Method`/`Mcp-Name`, the
`server/discover` probe, result validation) is the SDK's, unchanged.

What the server sends on a request's stream before the answer is handled in the
caller's task, in order: a notification goes to the session's handler (progress to the
request's progress callback), a server request to the session's request handler, whose
answer is POSTed back. So the session's callbacks run in the context of the execution
that sent the request (`shared_sessions.current_user`).

Cancelling a caller cancels its POST: at 2026-07-28 closing a request's response stream
is its cancellation (the SDK sends no `notifications/cancelled` then either). One
request's HTTP failure fails that request only, with a JSON-RPC `CONNECTION_CLOSED`
error, as the SDK answers a request whose response stream ended; the session carries on
(the next request opens a new connection). A session that fell back to the initialize
handshake (a legacy server: the shared session then refuses it, `protocol_mismatch`)
ends the server's session with a DELETE when it closes, as the SDK's transport does.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import httpx2
from mcp import MCPError
from mcp.client.streamable_http import RequestContext, StreamableHTTPTransport
from mcp.shared._otel import inject_trace_context, otel_span
from mcp.shared.dispatcher import (
    CallOptions,
    OnNotify,
    OnNotifyIntercept,
    OnRequest,
    ProgressFnT,
    coerce_request_id,
    run_notify_intercept,
)
from mcp.shared.exceptions import NoBackChannelError
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp.shared.jsonrpc_dispatcher import (
    handler_exception_to_error_data,
    progress_token_from_params,
)
from mcp.shared.message import ClientMessageMetadata, MessageMetadata, SessionMessage
from mcp.shared.transport_context import TransportContext
from mcp_types import (
    CONNECTION_CLOSED,
    REQUEST_TIMEOUT,
    ErrorData,
    JSONRPCError,
    JSONRPCMessage,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
    ProgressToken,
    RequestId,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from opentelemetry.trace import ProxyTracerProvider, SpanKind, get_tracer_provider

logger = logging.getLogger(__name__)

_TRANSPORT = TransportContext(kind="jsonrpc", can_send_request=True)
# How long closing the session waits for the DELETE of a legacy server's session (s).
_TERMINATE_TIMEOUT_SECONDS = 5.0


def _client_span(
    method: str, target: object, request_id: RequestId
) -> AbstractContextManager[object]:
    """The SDK dispatcher's client span around a request, when a tracer provider is set.

    Without one the SDK's span is OpenTelemetry's no-op: a non-recording span carrying
    the ambient span context, which is what `inject_trace_context` reads with or without
    it, so the request's `_meta` is the same. Skipping it saves its layers of context
    managers: 6.8-7.9 against 1.6-1.9 us a request with the injection (timeit), 1.6% of
    the service's CPU at 16 rounds in flight on 2026-07-28 (py-spy).
    """
    if isinstance(get_tracer_provider(), ProxyTracerProvider):
        return nullcontext()
    name = f"MCP send {method}{f' {target}' if isinstance(target, str) else ''}"
    return otel_span(
        name,
        kind=SpanKind.CLIENT,
        attributes={"mcp.method.name": method, "jsonrpc.request.id": str(request_id)},
    )


class PostDispatcher:
    """An SDK `Dispatcher` for a Streamable HTTP server at `url` on `http_client` (which
    the caller owns and closes): each request is one POST sent by its caller's task."""

    def __init__(self, url: str, http_client: httpx2.AsyncClient) -> None:
        # The SDK's transport, for its per-POST handling only (no writer loop, no streams).
        self._transport = StreamableHTTPTransport(url)
        # Parsed once: the transport hands its `url` to httpx2 for every request, which
        # parses a string each time (3.5% of the service's CPU in legacy rounds, py-spy)
        # and takes a parsed URL as it is.
        self._transport.url = httpx2.URL(url)  # type: ignore[assignment]
        self._http = http_client
        self._next_id = 0
        # The requests in flight, by coerced id (their responses' sinks).
        self._exchanges: dict[RequestId, _Exchange] = {}
        self._on_request: OnRequest | None = None
        self._on_notify: OnNotify | None = None
        self._intercept: OnNotifyIntercept | None = None
        self._running = False
        self._closed = False

    async def run(
        self,
        on_request: OnRequest,
        on_notify: OnNotify,
        on_notify_intercept: OnNotifyIntercept | None = None,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Ready at once; runs until the session closes (`_receive`), then ends the
        session on the server if it has one."""
        self._on_request = on_request
        self._on_notify = on_notify
        self._intercept = on_notify_intercept
        self._running = True
        task_status.started()
        try:
            await self._receive()
        finally:
            self._running = False
            self._closed = True
            self._stopped()
            if self._transport.session_id:
                with anyio.CancelScope(shield=True):
                    with anyio.move_on_after(_TERMINATE_TIMEOUT_SECONDS):
                        await self._transport.terminate_session(self._http)

    async def _receive(self) -> None:
        """Until the session closes: nothing to receive here, as every response comes
        back on its request's POST (a stateful session also reads its GET stream)."""
        await anyio.sleep_forever()

    def _stopped(self) -> None:
        """The session is closing: stop what still runs for it (nothing here)."""

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]:
        """POST a request and read its response.

        Raises:
            MCPError: the server's error; `CONNECTION_CLOSED` if the POST failed, its
                response ended without an answer, or the session is closed;
                `REQUEST_TIMEOUT` if `opts["timeout"]` elapsed.
        """
        if self._closed or not self._running:
            raise MCPError(code=CONNECTION_CLOSED, message="Connection closed")
        opts = opts or {}
        request_id = opts.get("request_id")
        if request_id is None:
            request_id = self._mint_id()
        elif coerce_request_id(request_id) in self._exchanges:
            raise ValueError(f"request id {request_id!r} is already in flight")
        out_params = dict(params) if params is not None else {}
        out_meta = dict(out_params.get("_meta") or {})
        on_progress = opts.get("on_progress")
        if on_progress is not None:
            out_meta["progressToken"] = request_id  # as the SDK's dispatcher does
        key = coerce_request_id(request_id)
        exchange = _Exchange(self, request_id, on_progress)
        self._exchanges[key] = exchange
        timeout = opts.get("timeout")
        cancelled = True
        try:
            with _client_span(method, out_params.get("name"), request_id):
                inject_trace_context(out_meta)
                if out_meta:
                    out_params["_meta"] = out_meta
                else:
                    out_params.pop("_meta", None)
                message = (
                    JSONRPCRequest(jsonrpc="2.0", id=request_id, method=method, params=out_params)
                    if out_params
                    else JSONRPCRequest(jsonrpc="2.0", id=request_id, method=method)
                )
                headers = opts.get("headers")
                if method == "initialize":
                    # The handshake negotiates the version: no probe-stamped one on it.
                    self._transport._protocol_version_header = None
                elif headers and (version := headers.get(MCP_PROTOCOL_VERSION_HEADER)):
                    # Also what this session's answers and notifications carry.
                    self._transport._protocol_version_header = version
                with anyio.fail_after(timeout) if timeout is not None else nullcontext():
                    await self._post(message, headers, exchange)
                cancelled = False
        except TimeoutError:
            await self._abandoned(request_id, f"timed out after {timeout}s", shield=False)
            raise MCPError(code=REQUEST_TIMEOUT, message=f"Request {method!r} timed out") from None
        except anyio.get_cancelled_exc_class():
            await self._abandoned(request_id, "caller cancelled", shield=True)
            raise
        finally:
            if self._exchanges.get(key) is exchange:
                del self._exchanges[key]
            await self._ended(exchange, cancelled=cancelled)
        outcome = exchange.outcome
        if outcome is None:
            raise MCPError(
                code=CONNECTION_CLOSED, message="the server's response carried no answer"
            )
        if isinstance(outcome, ErrorData):
            raise MCPError(code=outcome.code, message=outcome.message, data=outcome.data)
        return outcome

    async def notify(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> None:
        """POST a notification (best effort, as the SDK's transport sends them). At
        2026-07-28 `notifications/cancelled` is not sent: a request is cancelled by
        closing its response stream (its caller's cancellation does that)."""
        if self._closed:
            return
        version = self._transport._protocol_version_header
        if method == "notifications/cancelled" and version in MODERN_PROTOCOL_VERSIONS:
            return
        message = (
            JSONRPCNotification(jsonrpc="2.0", method=method, params=dict(params))
            if params
            else JSONRPCNotification(jsonrpc="2.0", method=method)
        )
        headers = (opts or {}).get("headers")
        if headers and (stamped := headers.get(MCP_PROTOCOL_VERSION_HEADER)):
            # As the SDK's transport: what later answers and the GET stream carry.
            self._transport._protocol_version_header = stamped
        await self._post_quietly(message, headers)

    def _mint_id(self) -> int:
        self._next_id += 1
        while self._next_id in self._exchanges:
            self._next_id += 1
        return self._next_id

    async def _post(
        self, message: JSONRPCMessage, headers: dict[str, str] | None, sink: _Sink
    ) -> None:
        """One POST through the SDK transport's POST handling; what its response
        carries goes to `sink`. A request whose POST fails is answered
        `CONNECTION_CLOSED` (into `sink`)."""
        metadata = ClientMessageMetadata(headers=headers) if headers else None
        context = RequestContext(
            client=self._http,
            session_id=self._transport.session_id,
            session_message=SessionMessage(message, metadata=metadata),
            metadata=metadata,
            read_stream_writer=sink,  # type: ignore[arg-type]  # only its send() is used
        )
        try:
            await self._transport._handle_post_request(context)
        except Exception as exc:  # httpx2.TransportError and anything else one POST raises
            if not isinstance(message, JSONRPCRequest) or self._raises_transport_errors():
                raise
            reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if not isinstance(exc, httpx2.TransportError):
                logger.warning("MCP request %r failed in the transport", message.id, exc_info=True)
            await sink.send(
                SessionMessage(
                    JSONRPCError(
                        jsonrpc="2.0",
                        id=message.id,
                        error=ErrorData(
                            code=CONNECTION_CLOSED,
                            message=f"HTTP request to the MCP server failed: {reason}",
                        ),
                    )
                )
            )

    async def _post_quietly(self, message: JSONRPCMessage, headers: dict[str, str] | None) -> None:
        """POST an answer or a notification; a failure is logged (nothing waits for it)."""
        try:
            await self._post(message, headers, _DROP)
        except Exception:
            name = type(message).__name__
            logger.warning("could not send %s to the MCP server", name, exc_info=True)

    # Hooks for a session with state on the server (`contained_session`); at 2026-07-28
    # closing a request's response stream is all there is to abandoning it, and what the
    # server sends on it is handled in order, in the caller's task.

    def _raises_transport_errors(self) -> bool:
        """Whether a request's failed POST raises its error (rather than failing the
        request `CONNECTION_CLOSED`)."""
        return False

    async def _abandoned(self, request_id: RequestId, reason: str, *, shield: bool) -> None:
        """The caller stopped waiting for `request_id` (its POST is closed)."""

    async def _ended(self, exchange: _Exchange, *, cancelled: bool) -> None:
        """`exchange`'s POST is over (`cancelled`: its caller was cancelled)."""

    async def _on_server_request(
        self, request: JSONRPCRequest, metadata: MessageMetadata, exchange: _Exchange
    ) -> None:
        """A request the server sent on `exchange`'s response stream."""
        await self._answer(request, metadata)

    async def _answer(self, request: JSONRPCRequest, metadata: MessageMetadata) -> None:
        """Run the session's handler for a request the server sent on a response
        stream, and POST its answer."""
        assert self._on_request is not None
        context = _Context(self, request.id, metadata, progress_token_from_params(request.params))
        reply: JSONRPCMessage
        try:
            result = await self._on_request(context, request.method, request.params)
            reply = JSONRPCResponse(jsonrpc="2.0", id=request.id, result=result)
        except Exception as exc:
            error = handler_exception_to_error_data(exc)
            if error is None:
                logger.exception("handler for %r raised", request.method)
                error = ErrorData(code=0, message=str(exc))  # as the SDK's dispatcher answers
            reply = JSONRPCError(jsonrpc="2.0", id=request.id, error=error)
        finally:
            context.close()
        await self._post_quietly(reply, None)

    async def _notified(self, notification: JSONRPCNotification, metadata: MessageMetadata) -> None:
        if run_notify_intercept(self._intercept, notification.method, notification.params):
            return
        assert self._on_notify is not None
        try:
            await self._on_notify(
                _Context(self, None, metadata), notification.method, notification.params
            )
        except Exception:
            logger.exception("notification handler for %r raised", notification.method)


class _Sink:
    """Where the SDK transport's POST handling puts what a response carries."""

    async def send(self, item: SessionMessage | Exception) -> None:
        return None


_DROP = _Sink()


class _Exchange(_Sink):
    """One request's response: its answer, and what the server sent before it."""

    def __init__(
        self, dispatcher: PostDispatcher, request_id: RequestId, on_progress: ProgressFnT | None
    ) -> None:
        self._dispatcher = dispatcher
        self._key = coerce_request_id(request_id)
        self._on_progress = on_progress
        self.outcome: dict[str, Any] | ErrorData | None = None
        # The handlers of requests the server sent on this response, where they run in
        # tasks of their own (`contained_session`).
        self.handlers: list[Any] = []

    async def send(self, item: SessionMessage | Exception) -> None:
        if isinstance(item, Exception):
            logger.debug("MCP response stream yielded %r", item)
            return
        message = item.message
        if isinstance(message, JSONRPCResponse):
            if self._answers(message.id):
                self.outcome = message.result
        elif isinstance(message, JSONRPCError):
            # An error without an id on this request's own response is its answer too
            # (the server could not read the id).
            if message.id is None or self._answers(message.id):
                self.outcome = message.error
        elif isinstance(message, JSONRPCNotification):
            await self._progress(message)
            await self._dispatcher._notified(message, item.metadata)
        else:
            await self._dispatcher._on_server_request(message, item.metadata, self)

    def _answers(self, request_id: RequestId | None) -> bool:
        if (
            self.outcome is None
            and request_id is not None
            and coerce_request_id(request_id) == self._key
        ):
            return True
        logger.debug("dropped a response to request %r", request_id)
        return False

    async def _progress(self, message: JSONRPCNotification) -> None:
        if message.method != "notifications/progress" or self._on_progress is None:
            return
        params = message.params or {}
        token, progress = params.get("progressToken"), params.get("progress")
        if (
            not isinstance(token, str | int)
            or isinstance(token, bool)
            or not isinstance(progress, int | float)
            or isinstance(progress, bool)
            or coerce_request_id(token) != self._key
        ):
            return
        total, text = params.get("total"), params.get("message")
        try:
            await self._on_progress(
                float(progress),
                float(total) if isinstance(total, int | float) else None,
                text if isinstance(text, str) else None,
            )
        except Exception:
            logger.exception("progress callback raised")


@dataclass
class _Context:
    """The `DispatchContext` of a message the server sent on a response stream."""

    _dispatcher: PostDispatcher
    _request_id: RequestId | None
    message_metadata: MessageMetadata = None
    _progress_token: ProgressToken | None = None
    cancel_requested: anyio.Event = field(default_factory=anyio.Event)
    _closed: bool = False

    @property
    def transport(self) -> TransportContext:
        return _TRANSPORT

    @property
    def request_id(self) -> RequestId | None:
        return self._request_id

    @property
    def can_send_request(self) -> bool:
        return not self._closed

    async def notify(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> None:
        if not self._closed:
            await self._dispatcher.notify(method, params, opts)

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]:
        if not self.can_send_request:
            raise NoBackChannelError(method)
        return await self._dispatcher.send_raw_request(method, params, opts)

    async def progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        if self._progress_token is None:
            return
        params: dict[str, Any] = {"progressToken": self._progress_token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        await self.notify("notifications/progress", params)

    def close(self) -> None:
        self._closed = True
