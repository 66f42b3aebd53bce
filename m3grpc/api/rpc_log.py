"""A server interceptor: one log line per RPC (method, status code, duration)
and a call to an observer (the metrics) with the same three facts.

Requests and responses are never logged: only the method, the code and the time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

log = logging.getLogger("m3grpc.rpc")

RpcObserver = Callable[[str, str, float], None]


def _code_name(context: Any, default: grpc.StatusCode) -> str:
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return str(code.name)
    if isinstance(code, int):  # grpc.aio may keep the numeric code
        for status in grpc.StatusCode:
            if status.value[0] == code:
                return str(status.name)
    return str(default.name)


class RpcLogInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    def __init__(self, observer: RpcObserver | None = None) -> None:
        self._observer = observer

    def _done(self, method: str, code: str, started: float) -> None:
        seconds = time.monotonic() - started
        # Health checks come every few seconds from orchestrators: DEBUG, not INFO.
        level = logging.DEBUG if method.startswith("/grpc.health.") else logging.INFO
        log.log(
            level,
            "%s %s %.1f ms",
            method,
            code,
            seconds * 1000,
            extra={"event": "rpc", "method": method, "code": code, "duration_ms": seconds * 1000},
        )
        if self._observer is not None:
            self._observer(method, code, seconds)

    async def intercept_service(
        self,
        continuation: Callable[[Any], Awaitable[Any]],
        handler_call_details: Any,
    ) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = str(handler_call_details.method)
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(method, handler.unary_unary),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._streaming(method, handler.unary_stream),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                self._streaming(method, handler.stream_stream),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler  # stream-unary: none are served

    def _unary(self, method: str, behaviour: Callable[..., Any]) -> Callable[..., Any]:
        async def wrapper(request: Any, context: Any) -> Any:
            started = time.monotonic()
            code = grpc.StatusCode.OK
            try:
                return await behaviour(request, context)
            except asyncio.CancelledError:
                code = grpc.StatusCode.CANCELLED
                raise
            except grpc.aio.AbortError:
                code = grpc.StatusCode.UNKNOWN
                raise
            except Exception:
                code = grpc.StatusCode.UNKNOWN
                raise
            finally:
                self._done(method, _code_name(context, code), started)

        return wrapper

    def _streaming(self, method: str, behaviour: Callable[..., Any]) -> Callable[..., Any]:
        async def wrapper(request: Any, context: Any) -> AsyncIterator[Any]:
            started = time.monotonic()
            code = grpc.StatusCode.OK
            try:
                result = behaviour(request, context)
                if hasattr(result, "__aiter__"):
                    async for item in result:
                        yield item
                else:  # a handler that writes with context.write and returns
                    await result
            except asyncio.CancelledError:
                code = grpc.StatusCode.CANCELLED
                raise
            except Exception:
                code = grpc.StatusCode.UNKNOWN
                raise
            finally:
                self._done(method, _code_name(context, code), started)

        return wrapper
