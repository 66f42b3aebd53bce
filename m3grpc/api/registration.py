"""Registers servicers on a grpc.aio server with request deserializers that never raise.

grpc's generated registration decodes a request with `FromString`; bytes that
do not decode (not a message, a string that is not UTF-8, a Struct nested past
the decoder's depth limit) make grpc answer UNKNOWN or INTERNAL without any
details. Here the deserializer hands the handler an `Undecodable` instead,
and `guard` rejects it with the service's typed INVALID_ARGUMENT error
(ErrorInfo included) and one log line. A decoded request with a NUL character
in any string (a field, a map key, a Struct key or value) is rejected the same
way, with a field violation per string and no log line.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf import descriptor, message, message_factory

from m3grpc.api.request_paths import nul_paths
from m3grpc.errors import FieldViolation, ManagedInputValidationError, ModelValidationError
from m3grpc.runtime.limits import ID_FIELDS
from m3grpc.text import NUL_PROBLEM

log = logging.getLogger(__name__)

InvalidRequest = type[ModelValidationError] | type[ManagedInputValidationError]


class Undecodable:
    """A request rejected before its handler runs; `error` is what the caller gets.

    Bytes that did not decode (logged, one line), or a message holding a NUL
    character in a string (no store can keep one: PostgreSQL text and JSONB
    refuse it), reported as field violations."""

    def __init__(
        self,
        error: ModelValidationError | ManagedInputValidationError,
        log_line: str | None = None,
    ) -> None:
        self.error = error
        self.log_line = log_line

    def log(self) -> None:
        if self.log_line is not None:
            log.warning("%s", self.log_line)


def _deserializer(cls: type[message.Message], invalid: InvalidRequest) -> Callable[[bytes], Any]:
    name = cls.DESCRIPTOR.full_name

    def deserialize(data: bytes) -> message.Message | Undecodable:
        try:
            request = cls.FromString(data)
        except (message.DecodeError, RecursionError, ValueError) as exc:
            reason = str(exc) or type(exc).__name__
            return Undecodable(
                invalid(f"the request is not a valid {name} message"),
                f"rejected an undecodable {name} ({len(data)} bytes): {reason}",
            )
        # A string holding U+0000 is a zero byte on the wire (UTF-8, verbatim):
        # without one, no string can hold it and the walk (a few percent of the
        # service's CPU, every request) is skipped.
        paths = nul_paths(request) if b"\0" in data else []
        if paths:
            # A malformed ID is MANAGED_INPUT_INVALID on every service (the one rule
            # of docs/reference/identifiers.md); anything else, the service's reason.
            error = ManagedInputValidationError if set(paths) <= ID_FIELDS else invalid
            return Undecodable(
                error(
                    "strings must not contain NUL characters",
                    field_violations=[FieldViolation(path, NUL_PROBLEM) for path in paths],
                )
            )
        return request

    return deserialize


def add_servicer(
    server: grpc.aio.Server,
    servicer: object,
    service: descriptor.ServiceDescriptor,
    invalid: InvalidRequest,
) -> None:
    """Register every method of `service` on `server`, like the generated
    `add_*Servicer_to_server`, with `invalid` as the error for undecodable bytes."""
    handlers: dict[str, grpc.RpcMethodHandler] = {}
    for method in service.methods:
        request_cls = message_factory.GetMessageClass(method.input_type)
        response_cls = message_factory.GetMessageClass(method.output_type)
        behaviour = getattr(servicer, method.name)
        make = (
            grpc.unary_stream_rpc_method_handler
            if method.server_streaming
            else grpc.unary_unary_rpc_method_handler
        )
        handlers[method.name] = make(
            behaviour,
            request_deserializer=_deserializer(request_cls, invalid),
            response_serializer=response_cls.SerializeToString,
        )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )
    server.add_registered_method_handlers(service.full_name, handlers)
