"""Decorators that turn whatever a handler raises into a google.rpc.Status.

Without them an exception would reach the client as UNKNOWN with its text;
with them a typed M3Error becomes its mapped status (see `status`) and
anything else becomes a generic INTERNAL, logged with its traceback here.
Field violations become paths into the request (`request_paths`), and a
request whose bytes did not decode (`registration.Undecodable`) is rejected
with its typed INVALID_ARGUMENT before the handler runs.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn, TypeAlias, TypeVar

import grpc
from google.protobuf import message
from grpc_status import rpc_status

from m3grpc.api import request_paths
from m3grpc.api.registration import Undecodable
from m3grpc.errors import M3Error, ManagedInputValidationError, ModelValidationError
from m3grpc.wire.status import code_for, status_for

log = logging.getLogger(__name__)

Req = TypeVar("Req")
Resp = TypeVar("Resp")
Self = TypeVar("Self")

# grpc.aio.ServicerContext; grpc ships no type hints.
Context: TypeAlias = Any
UnaryHandler = Callable[[Self, Req, Context], Awaitable[Resp]]
StreamHandler = Callable[[Self, Req, Context], AsyncIterator[Resp]]


async def abort_with(context: Context, error: BaseException) -> NoReturn:
    await context.abort_with_status(rpc_status.to_status(status_for(error)))
    raise AssertionError("abort_with_status returned")  # pragma: no cover


async def _fail(context: Context, method: str, request: object, error: Exception) -> NoReturn:
    if isinstance(error, grpc.aio.AbortError):
        raise error  # the handler already chose a status
    if not (isinstance(error, M3Error) and code_for(error) is not None):
        log.error("unexpected error in %s", method, exc_info=error)
    if isinstance(error, ModelValidationError | ManagedInputValidationError) and isinstance(
        request, message.Message
    ):
        error.field_violations = tuple(
            request_paths.violations_for(request, error.field_violations)
        )
    await abort_with(context, error)


def _decoded(request: object) -> None:
    if isinstance(request, Undecodable):
        request.log()
        raise request.error


def unary(handler: UnaryHandler[Self, Req, Resp]) -> UnaryHandler[Self, Req, Resp]:
    @functools.wraps(handler)
    async def wrapper(self: Self, request: Req, context: Context) -> Resp:
        try:
            _decoded(request)
            return await handler(self, request, context)
        except Exception as error:
            await _fail(context, handler.__qualname__, request, error)

    return wrapper


def stream(handler: StreamHandler[Self, Req, Resp]) -> StreamHandler[Self, Req, Resp]:
    @functools.wraps(handler)
    async def wrapper(self: Self, request: Req, context: Context) -> AsyncIterator[Resp]:
        try:
            _decoded(request)
            async for item in handler(self, request, context):
                yield item
        except Exception as error:
            await _fail(context, handler.__qualname__, request, error)

    return wrapper
