"""Typed M3 errors <-> `google.rpc.Status` with details (AIP-193), both directions:
`status_for` (the server: error -> status) and `error_from_status` / `typed_error`
(the clients: status -> the same typed error).

Every error a client sees is a `google.rpc.Status` built with grpcio-status.
Its details carry one `google.rpc.ErrorInfo` (domain `m3grpc.dev`, reason =
the error's `reason`, metadata = the error's `metadata`) plus the details
below. The status message is the error's message (field violations travel in
`BadRequest`, not in the message). The most specific class wins
(`RoundNotFoundError` before `ManagedInputStateError`, `ResultWaitTimeout`
before `OperationTimeout`).

| Python exception               | ErrorInfo reason                   | gRPC code           | other details          |
|--------------------------------|------------------------------------|---------------------|------------------------|
| ModelValidationError           | MODEL_VALIDATION_FAILED            | INVALID_ARGUMENT    | BadRequest             |
| ManagedInputValidationError    | MANAGED_INPUT_INVALID              | INVALID_ARGUMENT    | BadRequest             |
| ManagedInputConflict           | MANAGED_INPUT_CONFLICT             | ABORTED             | -                      |
| RoundNotFoundError             | ROUND_NOT_FOUND                    | NOT_FOUND           | ResourceInfo           |
| ManagedInputStateError         | MANAGED_INPUT_STATE_INVALID        | FAILED_PRECONDITION | PreconditionFailure    |
| ManagedInputRecoveryError      | MANAGED_INPUT_RECOVERY_UNAVAILABLE | FAILED_PRECONDITION | PreconditionFailure    |
| ResultWaitTimeout              | RESULT_WAIT_TIMEOUT                | DEADLINE_EXCEEDED   | -                      |
| OperationTimeout               | OPERATION_TIMEOUT                  | DEADLINE_EXCEEDED   | -                      |
| ExecutionNotFoundError         | EXECUTION_NOT_FOUND                | NOT_FOUND           | ResourceInfo           |
| ServerBindingNotFoundError     | SERVER_BINDING_NOT_FOUND           | NOT_FOUND           | ResourceInfo           |
| WorkQueueFullError             | WORK_QUEUE_FULL                    | RESOURCE_EXHAUSTED  | RetryInfo              |
| RateLimitedError               | RATE_LIMITED                       | RESOURCE_EXHAUSTED  | RetryInfo              |
| ElicitationNotAnsweredError    | ELICITATION_NOT_ANSWERED           | FAILED_PRECONDITION | -                      |
| RoundLimitExceededError        | ROUND_LIMIT_EXCEEDED               | FAILED_PRECONDITION | -                      |
| ServiceShuttingDownError       | SERVICE_SHUTTING_DOWN              | UNAVAILABLE         | -                      |
| StorageUnavailableError        | STORAGE_UNAVAILABLE                | UNAVAILABLE         | RetryInfo              |
| UnauthenticatedError           | UNAUTHENTICATED                    | UNAUTHENTICATED     | -                      |
| InternalError                  | INTERNAL                           | INTERNAL            | -                      |
| any other exception            | INTERNAL                           | INTERNAL            | - (generic message)    |

ResourceInfo types: `m3grpc.dev/ElicitationRound`, `m3grpc.dev/Execution`,
`m3grpc.dev/ServerBinding`; resource_name is the ID or binding name.
PreconditionFailure has one violation: type = the reason, subject = the round
ID (else the execution ID), description = the message. RetryInfo.retry_delay
is the error's `retry_after_seconds` (WorkQueueFullError, StorageUnavailableError).
An unexpected exception is logged with its traceback on the server; the
client gets only "internal error". Text the caller supplied can be echoed (IDs, keys, schema messages): it is cut short,
and at most eight field violations are sent, so a status always fits the
trailer size clients accept.

The way back: the ErrorInfo reason picks the class (m3grpc.errors, including
InternalError and ServiceShuttingDownError); metadata, BadRequest field
violations, `conflict_kind` and RetryInfo fill it in. Every failed call becomes
an M3Error whose `code` is the status code name, as in the TypeScript and Go
clients: a status without a known M3 reason (a transport failure such as
UNAVAILABLE, the call's own DEADLINE_EXCEEDED or CANCELLED, or a reason this
client does not know) is a `RemoteCallError`, and INTERNAL without a reason is
an `InternalError`. The original `grpc.RpcError` is the error's `__cause__`.
"""  # noqa: E501

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import grpc
from google.protobuf import any_pb2, message
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from m3grpc import errors
from m3grpc.clipping import clip
from m3grpc.errors import (
    ERROR_DOMAIN,
    ConflictKind,
    ElicitationNotAnsweredError,
    ExecutionNotFoundError,
    FieldViolation,
    InternalError,
    M3Error,
    ManagedInputConflict,
    ManagedInputRecoveryError,
    ManagedInputStateError,
    ManagedInputValidationError,
    ModelValidationError,
    OperationTimeout,
    RateLimitedError,
    ResultWaitTimeout,
    RoundLimitExceededError,
    RoundNotFoundError,
    ServerBindingNotFoundError,
    ServiceShuttingDownError,
    StorageUnavailableError,
    UnauthenticatedError,
    WorkQueueFullError,
)
from m3grpc.wire import convert

INTERNAL_REASON = InternalError.reason
SHUTTING_DOWN_REASON = ServiceShuttingDownError.reason


@dataclass(frozen=True)
class _Resource:
    type: str
    metadata_key: str


# One Python type -> one status code. Looked up along the exception's MRO, so a
# subclass listed here wins over its base.
_CODES: dict[type[M3Error], grpc.StatusCode] = {
    ModelValidationError: grpc.StatusCode.INVALID_ARGUMENT,
    ManagedInputValidationError: grpc.StatusCode.INVALID_ARGUMENT,
    ManagedInputConflict: grpc.StatusCode.ABORTED,
    RoundNotFoundError: grpc.StatusCode.NOT_FOUND,
    ManagedInputStateError: grpc.StatusCode.FAILED_PRECONDITION,
    ManagedInputRecoveryError: grpc.StatusCode.FAILED_PRECONDITION,
    ResultWaitTimeout: grpc.StatusCode.DEADLINE_EXCEEDED,
    OperationTimeout: grpc.StatusCode.DEADLINE_EXCEEDED,
    ExecutionNotFoundError: grpc.StatusCode.NOT_FOUND,
    ServerBindingNotFoundError: grpc.StatusCode.NOT_FOUND,
    WorkQueueFullError: grpc.StatusCode.RESOURCE_EXHAUSTED,
    RateLimitedError: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ElicitationNotAnsweredError: grpc.StatusCode.FAILED_PRECONDITION,
    RoundLimitExceededError: grpc.StatusCode.FAILED_PRECONDITION,
    ServiceShuttingDownError: grpc.StatusCode.UNAVAILABLE,
    StorageUnavailableError: grpc.StatusCode.UNAVAILABLE,
    InternalError: grpc.StatusCode.INTERNAL,
    UnauthenticatedError: grpc.StatusCode.UNAUTHENTICATED,
}

_RESOURCES: dict[type[M3Error], _Resource] = {
    RoundNotFoundError: _Resource("m3grpc.dev/ElicitationRound", "round_id"),
    ExecutionNotFoundError: _Resource("m3grpc.dev/Execution", "execution_id"),
    ServerBindingNotFoundError: _Resource("m3grpc.dev/ServerBinding", "server"),
}


def code_for(error: M3Error) -> grpc.StatusCode | None:
    """The status code of a typed error, or None when its class is not mapped."""
    for cls in type(error).__mro__:
        if cls in _CODES:
            return _CODES[cls]
    return None


# A status travels in HTTP/2 trailers, which clients cap (8 KiB by default):
# caller-supplied text echoed in it (IDs, keys, schema messages quoting content)
# is cut to these sizes (UTF-8 bytes), and at most this many violations are sent.
_MAX_MESSAGE_BYTES = 300
_MAX_TEXT_BYTES = 160
_MAX_FIELD_BYTES = 400
_MAX_VIOLATIONS = 8


def status_for(error: BaseException) -> status_pb2.Status:
    """The google.rpc.Status sent for `error` (INTERNAL for anything unmapped)."""
    code = code_for(error) if isinstance(error, M3Error) else None
    if code is None or not isinstance(error, M3Error):
        return internal_status()
    metadata = {
        key: clip(value, _MAX_TEXT_BYTES, unit="bytes") for key, value in error.metadata.items()
    }
    details: list[message.Message] = [
        error_details_pb2.ErrorInfo(reason=error.reason, domain=ERROR_DOMAIN, metadata=metadata)
    ]
    details.extend(_extra_details(error))
    text = error.message
    if isinstance(error, ModelValidationError | ManagedInputValidationError):
        extra = len(error.field_violations) - _MAX_VIOLATIONS
        if extra > 0:
            text = f"{text} (and {extra} more problems)"
    return _status(code, clip(text, _MAX_MESSAGE_BYTES, unit="bytes"), details)


def internal_status() -> status_pb2.Status:
    return _status(
        grpc.StatusCode.INTERNAL,
        "internal error",
        [error_details_pb2.ErrorInfo(reason=INTERNAL_REASON, domain=ERROR_DOMAIN)],
    )


def shutting_down_status() -> status_pb2.Status:
    return _status(
        grpc.StatusCode.UNAVAILABLE,
        "the service is shutting down; reconnect and resume with the last cursor",
        [error_details_pb2.ErrorInfo(reason=SHUTTING_DOWN_REASON, domain=ERROR_DOMAIN)],
    )


def _extra_details(error: M3Error) -> list[message.Message]:
    if isinstance(error, ModelValidationError | ManagedInputValidationError):
        return [
            error_details_pb2.BadRequest(
                field_violations=[
                    error_details_pb2.BadRequest.FieldViolation(
                        field=clip(violation.field, _MAX_FIELD_BYTES, unit="bytes"),
                        description=clip(violation.description, _MAX_TEXT_BYTES, unit="bytes"),
                    )
                    for violation in error.field_violations[:_MAX_VIOLATIONS]
                ]
            )
        ]
    for cls in type(error).__mro__:
        resource = _RESOURCES.get(cls)
        if resource is not None:
            return [
                error_details_pb2.ResourceInfo(
                    resource_type=resource.type,
                    resource_name=clip(
                        error.metadata.get(resource.metadata_key, ""), _MAX_TEXT_BYTES, unit="bytes"
                    ),
                    description=clip(error.message, _MAX_TEXT_BYTES, unit="bytes"),
                )
            ]
    if isinstance(error, ManagedInputStateError | ManagedInputRecoveryError):
        subject = error.metadata.get("round_id") or error.metadata.get("execution_id", "")
        return [
            error_details_pb2.PreconditionFailure(
                violations=[
                    error_details_pb2.PreconditionFailure.Violation(
                        type=error.reason,
                        subject=clip(subject, _MAX_TEXT_BYTES, unit="bytes"),
                        description=clip(error.message, _MAX_TEXT_BYTES, unit="bytes"),
                    )
                ]
            )
        ]
    if isinstance(error, WorkQueueFullError | StorageUnavailableError | RateLimitedError):
        return [
            error_details_pb2.RetryInfo(retry_delay=convert.duration(error.retry_after_seconds))
        ]
    return []


def _status(code: grpc.StatusCode, text: str, details: list[message.Message]) -> status_pb2.Status:
    packed = []
    for detail in details:
        holder = any_pb2.Any()
        holder.Pack(detail)
        packed.append(holder)
    number = getattr(code_pb2, code.name)
    return status_pb2.Status(code=number, message=text, details=packed)


# -- the way back (clients): google.rpc.Status -> typed error ---------------------


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
    if issubclass(cls, WorkQueueFullError | StorageUnavailableError | RateLimitedError):
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
