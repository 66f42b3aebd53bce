"""A server interceptor: one log line per RPC (method, status code, duration)
and a call to an observer (the metrics) with the same three facts.

Requests and responses are never logged: only the method, the code and the time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from m3grpc.api.interceptors import WrappingInterceptor, wrap_handler

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


class RpcLogInterceptor(WrappingInterceptor):
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

    def wrap(self, handler: Any, method: str, details: Any) -> Any:
        return wrap_handler(handler, lambda context: self._observed(method, context))

    @contextlib.asynccontextmanager
    async def _observed(self, method: str, context: Any) -> AsyncIterator[None]:
        started = time.monotonic()
        code = grpc.StatusCode.OK
        try:
            yield
        except asyncio.CancelledError:
            code = grpc.StatusCode.CANCELLED
            raise
        except Exception:
            code = grpc.StatusCode.UNKNOWN
            raise
        finally:
            self._done(method, _code_name(context, code), started)
