"""google.rpc.Status -> the typed M3 errors the embedded API raises.

The ErrorInfo reason picks the class (m3grpc.errors, including InternalError
and ServiceShuttingDownError); metadata, BadRequest field violations,
`conflict_kind` and RetryInfo fill it in. Every failed call becomes an
M3Error whose `code` is the status code name, as in the TypeScript and Go
clients: a status without a known M3 reason (a transport failure such as
UNAVAILABLE, the call's own DEADLINE_EXCEEDED or CANCELLED, or a reason this
client does not know) is a `RemoteCallError`, and INTERNAL without a reason is
an `InternalError`. The original `grpc.RpcError` is the error's `__cause__`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import grpc
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from m3grpc import errors
from m3grpc.errors import (
    ERROR_DOMAIN,
    ConflictKind,
    FieldViolation,
    InternalError,
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


class RemoteCallError(M3Error):
    """A failed remote call whose status carries no known M3 reason: act on `code`.

    A transport failure (`UNAVAILABLE`), the call's own deadline
    (`DEADLINE_EXCEEDED`), a cancelled call (`CANCELLED`), or an ErrorInfo
    reason this client does not know (`unknown_reason`, with its metadata).
    """

    reason: ClassVar[str] = ""

    def __init__(
        self,
        message: str,
        *,
        code: str,
        unknown_reason: str = "",
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message, metadata=metadata)
        self.code = code
        self.unknown_reason = unknown_reason


def typed_error(error: grpc.RpcError) -> M3Error:
    """The typed M3Error a failed call (a grpc.RpcError) stands for."""
    code = _code_name(error)
    details = getattr(error, "details", None)
    message = (details() if callable(details) else None) or code
    try:
        status = rpc_status.from_call(error)
    except (AttributeError, ValueError):  # not a call, or an inconsistent status
        status = None
    built = error_from_status(status) if status is not None else None
    if built is None:
        info = _detail(status, error_details_pb2.ErrorInfo) if status is not None else None
        if info is not None and info.domain != ERROR_DOMAIN:
            info = None
        if code == "INTERNAL" and info is None:
            built = InternalError(message)
        else:
            built = RemoteCallError(
                message,
                code=code,
                unknown_reason=info.reason if info is not None else "",
                metadata=dict(info.metadata) if info is not None else None,
            )
    built.code = code
    return built


def _code_name(error: grpc.RpcError) -> str:
    code = getattr(error, "code", None)
    value = code() if callable(code) else None
    return value.name if isinstance(value, grpc.StatusCode) else "UNKNOWN"


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
