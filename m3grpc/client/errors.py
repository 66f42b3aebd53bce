"""google.rpc.Status -> the typed M3 errors the embedded API raises.

The ErrorInfo reason picks the class (m3grpc.errors); metadata, BadRequest
field violations, `conflict_kind` and RetryInfo fill it in. A status without a
known M3 reason (INTERNAL, SERVICE_SHUTTING_DOWN, transport errors) stays the
original `grpc.RpcError`.
"""

from __future__ import annotations

from typing import Any

from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from m3grpc import errors
from m3grpc.errors import (
    ERROR_DOMAIN,
    ConflictKind,
    FieldViolation,
    M3Error,
    ManagedInputConflict,
    WorkQueueFullError,
)


def _typed_classes() -> dict[str, type[M3Error]]:
    found: dict[str, type[M3Error]] = {}
    pending: list[type[M3Error]] = [M3Error]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls.__module__ == errors.__name__ and not cls.__name__.startswith("_"):
            found.setdefault(cls.reason, cls)
    return found


_CLASSES = _typed_classes()


def typed_error(error: BaseException) -> BaseException:
    """The typed M3Error a failed call (a grpc.RpcError) stands for, or `error` itself."""
    try:
        status = rpc_status.from_call(error)
    except (AttributeError, ValueError):  # not a call, or an inconsistent status
        return error
    if status is None:
        return error
    built = error_from_status(status)
    return built if built is not None else error


def error_from_status(status: status_pb2.Status) -> M3Error | None:
    info = _detail(status, error_details_pb2.ErrorInfo)
    if info is None or info.domain != ERROR_DOMAIN:
        return None
    cls = _CLASSES.get(info.reason)
    if cls is None:
        return None
    metadata = dict(info.metadata)
    message = status.message
    if issubclass(cls, ManagedInputConflict):
        try:
            kind = ConflictKind(metadata.pop("conflict_kind", ""))
        except ValueError:
            return None
        return cls(message, conflict_kind=kind, metadata=metadata)
    if issubclass(cls, WorkQueueFullError):
        retry = _detail(status, error_details_pb2.RetryInfo)
        delay = retry.retry_delay.ToTimedelta().total_seconds() if retry is not None else 1.0
        return cls(message, retry_after_seconds=delay, metadata=metadata)
    if issubclass(cls, errors.ModelValidationError | errors.ManagedInputValidationError):
        bad_request = _detail(status, error_details_pb2.BadRequest)
        violations = [
            FieldViolation(v.field, v.description)
            for v in (bad_request.field_violations if bad_request is not None else ())
        ]
        return cls(message, field_violations=violations, metadata=metadata)
    return cls(message, metadata=metadata)


def _detail(status: status_pb2.Status, kind: Any) -> Any:
    for detail in status.details:
        if detail.Is(kind.DESCRIPTOR):
            message = kind()
            detail.Unpack(message)
            return message
    return None
