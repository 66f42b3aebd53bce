"""What the server interceptors share: a grpc.RpcMethodHandler rebuilt so that
each call of its behaviour runs inside an async context manager (the RPC log's
timing, the caller's authentication, the tracing span).

The context manager is entered before the behaviour runs and left after its
last response (or its error), for unary and streaming behaviours alike.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import grpc

# Given the call's context, what to run the call inside.
Around = Callable[[Any], AbstractAsyncContextManager[object]]


class WrappingInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """A server interceptor that passes each served method's handler through `wrap`."""

    async def intercept_service(
        self,
        continuation: Callable[[Any], Awaitable[Any]],
        handler_call_details: Any,
    ) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        return self.wrap(handler, str(handler_call_details.method), handler_call_details)

    def wrap(self, handler: Any, method: str, details: Any) -> Any:
        """The handler to serve `method` with (`details`: its grpc.HandlerCallDetails)."""
        raise NotImplementedError


def wrap_handler(handler: Any, around: Around, *, stream_stream: bool = True) -> Any:
    """`handler` with its unary-unary, unary-stream and (unless `stream_stream`
    is False) stream-stream behaviour run inside `around(context)`; any other
    handler (stream-unary: none are served) is returned as it is."""
    return rebuild_handler(
        handler,
        lambda behaviour: _unary(behaviour, around),
        lambda behaviour: _streaming(behaviour, around),
        stream_stream=stream_stream,
    )


Wrapper = Callable[[Callable[..., Any]], Callable[..., Any]]


def rebuild_handler(
    handler: Any, unary: Wrapper, streaming: Wrapper, *, stream_stream: bool = True
) -> Any:
    """`handler` with its unary-unary behaviour replaced by `unary(behaviour)`, its
    unary-stream (and unless `stream_stream` is False, stream-stream) behaviour by
    `streaming(behaviour)`; any other handler is returned as it is."""
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(
            unary(handler.unary_unary),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(
            streaming(handler.unary_stream),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
    if stream_stream and handler.stream_stream is not None:
        return grpc.stream_stream_rpc_method_handler(
            streaming(handler.stream_stream),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
    return handler


def _unary(behaviour: Callable[..., Any], around: Around) -> Callable[..., Any]:
    async def wrapper(request: Any, context: Any) -> Any:
        async with around(context):
            return await behaviour(request, context)

    return wrapper


def _streaming(behaviour: Callable[..., Any], around: Around) -> Callable[..., Any]:
    async def wrapper(request: Any, context: Any) -> AsyncIterator[Any]:
        async with around(context):
            result = behaviour(request, context)
            if hasattr(result, "__aiter__"):
                async for item in result:
                    yield item
            else:  # a handler that writes with context.write and returns
                await result

    return wrapper
