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

from m3grpc.api.interceptors import rebuild_handler

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
    """Runs on every call, configured or not: each served method's handler is
    wrapped once and the wrapped handler reused (grpc hands the same handler for
    a method on every call), and the wrapper times the call itself, without a
    context manager per call."""

    def __init__(self, observer: RpcObserver | None = None) -> None:
        self._observer = observer
        # Method -> (the handler grpc served it with, that handler wrapped).
        self._wrapped: dict[str, tuple[Any, Any]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[Any], Awaitable[Any]],
        handler_call_details: Any,
    ) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = str(handler_call_details.method)
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = self.wrap(handler, method)
        self._wrapped[method] = (handler, wrapped)  # one entry per served method
        return wrapped

    def _done(self, method: str, code: str, started: float) -> None:
        seconds = time.monotonic() - started
        # Health checks come every few seconds from orchestrators: DEBUG, not INFO.
        level = logging.DEBUG if method.startswith("/grpc.health.") else logging.INFO
        if log.isEnabledFor(level):
            log.log(
                level,
                "%s %s %.1f ms",
                method,
                code,
                seconds * 1000,
                extra={
                    "event": "rpc",
                    "method": method,
                    "code": code,
                    "duration_ms": seconds * 1000,
                },
            )
        if self._observer is not None:
            self._observer(method, code, seconds)

    def wrap(self, handler: Any, method: str) -> Any:
        """`handler` with each call timed, logged and observed."""
        done = self._done

        def unary(behaviour: Callable[..., Any]) -> Callable[..., Any]:
            async def timed(request: Any, context: Any) -> Any:
                started = time.monotonic()
                code = grpc.StatusCode.OK
                try:
                    return await behaviour(request, context)
                except asyncio.CancelledError:
                    code = grpc.StatusCode.CANCELLED
                    raise
                except Exception:
                    code = grpc.StatusCode.UNKNOWN
                    raise
                finally:
                    done(method, _code_name(context, code), started)

            return timed

        def streaming(behaviour: Callable[..., Any]) -> Callable[..., Any]:
            async def timed(request: Any, context: Any) -> AsyncIterator[Any]:
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
                    done(method, _code_name(context, code), started)

            return timed

        return rebuild_handler(handler, unary, streaming)
